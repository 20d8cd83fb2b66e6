"""hybridrl.models.transformers.ulysses_attention: ``ulysses_sdpa`` on a module without an SP group is plain SDPA.

SP=2 against SP=1 over 2 gloo ranks (the attention with the collectives of :mod:`hybridrl.utils.ulysses`) is in
tests/utils/test_ulysses_on_cpu.py.
"""

from __future__ import annotations

import torch

from hybridrl.models.transformers.ulysses_attention import register_ulysses_attention
from hybridrl.utils import ulysses


def test_unmarked_module_runs_plain_sdpa(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    name = register_ulysses_attention()
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="sdpa")
    ulys = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation=name)
    assert ulysses.sequence_parallel_group_of(ulys) is None
    ids = torch.randint(5, 500, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding: the mask path must stay SDPA's
    with torch.no_grad():
        torch.testing.assert_close(ulys(ids, attention_mask=mask).logits, plain(ids, attention_mask=mask).logits)
