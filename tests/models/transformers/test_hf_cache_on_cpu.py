"""``hybridrl.models.transformers.hf_cache.select_cache_rows``: the rows of a KV cache, with a deterministic backward.

The shared-prompt forward (``model.share_prompt_prefix``) repeats a cache's rows (one prefix row → G prompts,
G prompts → B rows); the gradient of a repeated row is the sum of its copies' gradients. transformers'
``batch_select_indices`` indexes (``keys[indices, ...]``), whose backward on CPU in float32 adds those copies
concurrently in another order each call (two fp32 quickstart runs of one seed parted at step 2 or 3). These
tests pin the values (the same rows as transformers') and the backward to the sequential sum, bit for bit.
"""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicCache

from hybridrl.models.transformers.hf_cache import select_cache_rows

# SmolLM2's KV shape at the quickstart's prefix pass: 1 row, 3 kv heads, 30 positions, head dim 64
KV_HEADS, POSITIONS, HEAD_DIM = 3, 30, 64


def cache_of(rows: int, layers: int = 2, seed: int = 0) -> tuple[DynamicCache, list[torch.Tensor]]:
    """A dynamic cache of ``layers`` layers ``[rows, 3, 30, 64]`` whose keys/values are leaves that take gradients."""
    gen = torch.Generator().manual_seed(seed)
    cache, leaves = DynamicCache(), []
    for layer in range(layers):
        keys, values = (torch.randn(rows, KV_HEADS, POSITIONS, HEAD_DIM, generator=gen).requires_grad_()
                        for _ in range(2))
        cache.update(keys, values, layer)
        leaves += [keys, values]
    return cache, leaves


def test_rows_equal_transformers_batch_select_indices():
    indices = torch.tensor([2, 0, 2, 1, 1, 2])
    ours, _ = cache_of(3)
    theirs, _ = cache_of(3)
    select_cache_rows(ours, indices)
    theirs.batch_select_indices(indices)
    for mine, reference in zip(ours.layers, theirs.layers):
        assert torch.equal(mine.keys, reference.keys) and torch.equal(mine.values, reference.values)
    assert ours.get_seq_length() == POSITIONS and ours.layers[0].keys.shape[0] == len(indices)


@pytest.mark.parametrize("rows, indices", [
    (1, torch.zeros(14, dtype=torch.long)),                       # the prefix pass: one row → 14 prompts
    (14, torch.arange(14).repeat_interleave(4)[torch.randperm(56, generator=torch.Generator().manual_seed(1))]),
])
def test_backward_is_the_sequential_sum_every_call(rows, indices):
    """Each source row's gradient is its copies' gradients added in index order, the same bits on every call
    (2 threads, float32: where advanced indexing's accumulation varies from call to call)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        grad_out = torch.randn(len(indices), KV_HEADS, POSITIONS, HEAD_DIM, generator=torch.Generator().manual_seed(2))
        expected = torch.zeros(rows, KV_HEADS, POSITIONS, HEAD_DIM)
        for copy, source in enumerate(indices.tolist()):  # the hand-written sum, in index order
            expected[source] += grad_out[copy]
        for _ in range(10):
            cache, leaves = cache_of(rows, layers=1)
            select_cache_rows(cache, indices)
            torch.autograd.backward([cache.layers[0].keys, cache.layers[0].values], [grad_out, 2 * grad_out])
            assert torch.equal(leaves[0].grad, expected)
            assert torch.equal(leaves[1].grad, 2 * expected)
    finally:
        torch.set_num_threads(threads)


def test_a_layer_without_positions_is_left_as_transformers_leaves_it_and_other_caches_use_their_own_select():
    cache, _ = cache_of(2, layers=1)
    cache.update(torch.zeros(2, KV_HEADS, 0, HEAD_DIM), torch.zeros(2, KV_HEADS, 0, HEAD_DIM), 1)
    select_cache_rows(cache, torch.tensor([1, 1, 0]))
    assert cache.layers[0].keys.shape[0] == 3
    assert tuple(cache.layers[1].keys.shape) == (2, KV_HEADS, 0, HEAD_DIM)  # batch_select_indices skips it too

    class LegacyCache:  # a cache without per-layer objects: its own batch_select_indices does the work
        def __init__(self):
            self.selected = None

        def batch_select_indices(self, indices):
            self.selected = indices

    legacy = LegacyCache()
    select_cache_rows(legacy, torch.tensor([0, 0]))
    assert legacy.selected.tolist() == [0, 0]
