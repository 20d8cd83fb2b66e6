"""``model.share_prompt_prefix``: each distinct prompt runs once and hands its KV cache to its rows.

Equality against the plain padded forward (the unoptimised path): log-probs, entropies and gradients on
GRPO-shaped batches (groups of rows sharing a prompt, shuffled, responses of different lengths), through
``forward_response`` on tied and untied models, through ``DataParallelPPOActor`` (log-probs and one
update) on a plain module and under FSDP2 / FSDP1, and the fall-backs.
"""

from __future__ import annotations

import copy

import pytest
import torch

from hybridrl.protocol import DataProto
from hybridrl.utils.remove_padding import common_prefix_length, prompt_groups
from hybridrl.utils.torch_functional import entropy_from_logits, logprobs_from_logits
from hybridrl.workers.actor import DataParallelPPOActor, shared_prefix
from hybridrl.workers.actor.forward import forward_response
from hybridrl.workers.actor.shared_prefix import forward_response_shared_prefix
from tests.workers.actor.conftest import ppo_batch_from
from tests.workers.engine.engine_testlib import fsdp_config, single_rank_group

PROMPT_LEN, RESPONSE_LEN = 9, 6


def grouped_batch(prompt_lens=(9, 5, 7), n=4, seed=0, shuffle=True, common=0) -> DataProto:
    """``len(prompt_lens)`` prompts × ``n`` responses: left-padded prompts ``[B, 9]``, responses ``[B, 6]`` of
    lengths 5, 4, 3, 2, 5, ... (the last column is padding in every row), rows shuffled; every prompt begins with
    the same ``common`` tokens (a chat template's system turn)."""
    gen = torch.Generator().manual_seed(seed)
    shared = torch.randint(5, 500, (PROMPT_LEN,), generator=gen)
    batch_size = len(prompt_lens) * n
    input_ids = torch.zeros(batch_size, PROMPT_LEN + RESPONSE_LEN, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for group, prompt_len in enumerate(prompt_lens):
        prompt = torch.randint(5, 500, (PROMPT_LEN,), generator=gen)
        first = PROMPT_LEN - prompt_len
        prompt[first : first + common] = shared[:common]
        for k in range(n):
            row = group * n + k
            response_len = RESPONSE_LEN - 1 - (row % 4)
            input_ids[row, :PROMPT_LEN] = prompt
            input_ids[row, PROMPT_LEN : PROMPT_LEN + response_len] = torch.randint(5, 500, (response_len,), generator=gen)
            attention_mask[row, PROMPT_LEN - prompt_len : PROMPT_LEN + response_len] = 1
    if shuffle:
        order = torch.randperm(batch_size, generator=gen)
        input_ids, attention_mask = input_ids[order], attention_mask[order]
    return ppo_batch_from(input_ids * attention_mask, attention_mask, PROMPT_LEN, gen)


def token_fn(logits, next_tokens):
    return [logprobs_from_logits(logits, next_tokens), entropy_from_logits(logits)]


def test_prompt_groups_hand_computed():
    ids = torch.tensor([[0, 7, 8], [5, 6, 9], [0, 7, 8], [1, 7, 8], [5, 6, 9]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 1, 1], [0, 1, 1], [1, 1, 1]])
    first_rows, group_of_row = prompt_groups(ids, mask)
    # rows 0, 2 and 3 hold the prompt [7, 8] (row 3's pad id differs), rows 1 and 4 hold [5, 6, 9]
    assert group_of_row[0] == group_of_row[2] == group_of_row[3] != group_of_row[1] == group_of_row[4]
    assert sorted(first_rows.tolist()) == [0, 1]
    assert torch.equal(ids[first_rows[group_of_row]] * mask, ids * mask)
    # the same ids behind another mask are another prompt; all distinct: nothing to share
    assert prompt_groups(ids[:2], mask[:2]) is None
    assert prompt_groups(torch.tensor([[3, 4], [3, 4]]), torch.tensor([[1, 1], [0, 1]])) is None


def test_common_prefix_length_hand_computed():
    ids = torch.tensor([[0, 7, 8, 9], [7, 8, 5, 6], [0, 7, 8, 3]])
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1]])
    assert common_prefix_length(ids, mask) == 2  # [7, 8] in every prompt, each keeps a token of its own
    # capped one below the shortest prompt: [7, 8] is all of row 2, which keeps its last token
    assert common_prefix_length(ids[[0, 1]], mask[[0, 1]]) == 2
    short = torch.tensor([[0, 0, 7, 8], [7, 8, 5, 6]])
    assert common_prefix_length(short, torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])) == 1
    assert common_prefix_length(torch.tensor([[7, 8], [5, 8]]), torch.ones(2, 2, dtype=torch.long)) == 0
    assert common_prefix_length(ids[:1], mask[:1]) == 0  # one prompt: nothing to share
    holes = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1]])  # not left padding: not this layout
    assert common_prefix_length(ids, holes) == 0


@pytest.fixture
def any_prefix(monkeypatch):
    """The prefix pass even where it saves only a few positions (the tiny batches here)."""
    monkeypatch.setattr(shared_prefix, "MIN_SAVED_POSITIONS", 1)


@pytest.mark.parametrize("common", [0, 3, 5], ids=["no_common_prefix", "common_prefix", "whole_shortest_prompt"])
@pytest.mark.parametrize("model_fixture", ["tiny_model_dir", "tiny_llama_dir"], ids=["qwen2_tied", "llama_untied"])
def test_shared_forward_equals_padded_forward(model_fixture, common, request, any_prefix):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(request.getfixturevalue(model_fixture), dtype=torch.float32)
    model.train()
    batch = grouped_batch(common=common).batch
    mask = batch["response_mask"].bool()
    results = {}
    for share in (False, True):
        model.zero_grad()
        outputs = forward_response(model, batch, False, token_fn, share_prompt_prefix=share)
        ((outputs[0] * mask).sum() + (outputs[1] * mask).sum()).backward()
        results[share] = outputs, [p.grad.clone() for p in model.parameters()]
    (plain, plain_grads), (shared, shared_grads) = results[False], results[True]
    for got, want in zip(shared, plain):
        assert got.shape == want.shape == mask.shape
        torch.testing.assert_close(got[mask], want[mask], rtol=1e-5, atol=1e-5)
    for got, want in zip(shared_grads, plain_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert bool((shared[0][:, -1] == 0).all())  # the all-padding last column is skipped, as in the plain path


def test_shared_path_runs_each_prompt_once(tiny_model_dir):
    """The prompt pass sees the 3 distinct prompts, the response pass every row's responses but the last kept token."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    shapes = []
    model.model.register_forward_pre_hook(lambda _m, _a, kw: shapes.append(tuple(kw["input_ids"].shape)),
                                          with_kwargs=True)
    batch = grouped_batch().batch  # 12 rows; prompts of 9/5/7 tokens; the 6th response column is all padding
    with torch.no_grad():
        out = forward_response_shared_prefix(model, batch, token_fn, lead=0, kept=5)
    assert shapes == [(3, 9), (12, 4)]
    assert out[0].shape == (12, 5)


@pytest.mark.parametrize("n", [4, 1], ids=["groups", "distinct_prompts"])
def test_common_prefix_runs_once(tiny_model_dir, any_prefix, n):
    """Prompts of 9/5/7 tokens beginning with the same 3: the prefix pass runs those 3 once, the prompt pass the
    last 9 - 3 columns of the 3 prompts; the same numbers as the plain padded forward, also with no repeated prompt."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    shapes = []
    model.model.register_forward_pre_hook(lambda _m, _a, kw: shapes.append(tuple(kw["input_ids"].shape)),
                                          with_kwargs=True)
    batch = grouped_batch(n=n, common=3).batch
    with torch.no_grad():
        out = forward_response_shared_prefix(model, batch, token_fn, lead=0, kept=5)
        shapes_shared = list(shapes)
        plain = forward_response(model, batch, False, token_fn)
    assert shapes_shared == [(1, 3), (3, 6), (3 * n, 4)]
    mask = batch["response_mask"][:, :5].bool()
    for got, want in zip(out, plain):
        torch.testing.assert_close(got[mask], want[:, :5][mask], rtol=1e-5, atol=1e-5)


def test_prefix_pass_only_when_it_saves_enough(tiny_model_dir):
    """3 prompts sharing 3 tokens save (3 - 1) · 3 = 6 positions: below ``MIN_SAVED_POSITIONS``, no prefix pass."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    shapes = []
    model.model.register_forward_pre_hook(lambda _m, _a, kw: shapes.append(tuple(kw["input_ids"].shape)),
                                          with_kwargs=True)
    assert shared_prefix.MIN_SAVED_POSITIONS > 6
    with torch.no_grad():
        forward_response_shared_prefix(model, grouped_batch(common=3).batch, token_fn, lead=0, kept=5)
        assert forward_response_shared_prefix(model, grouped_batch(n=1, common=3).batch, token_fn, 0, 5) is None
    assert shapes == [(3, 9), (12, 4)]


def test_fall_backs_to_the_plain_forward(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    distinct = grouped_batch(prompt_lens=(9, 5, 7), n=1).batch
    assert forward_response_shared_prefix(model, distinct, token_fn, lead=0, kept=6) is None
    model.gradient_checkpointing_enable() if not hasattr(model, "activation_checkpointing_enable") else (
        model.activation_checkpointing_enable())
    model.train()
    assert forward_response_shared_prefix(model, grouped_batch().batch, token_fn, lead=0, kept=6) is None
    # through forward_response the fall-backs give the plain path's numbers exactly
    model.eval()
    with torch.no_grad():
        plain = forward_response(model, distinct, False, token_fn)
        shared = forward_response(model, distinct, False, token_fn, share_prompt_prefix=True)
    assert all(torch.equal(a, b) for a, b in zip(plain, shared))


def test_one_token_prompts_and_one_token_responses(tiny_model_dir):
    """A prompt of one token (the prompt pass's only position) and a micro-batch whose responses all have one token
    (no response pass) give the plain forward's numbers."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    batch = grouped_batch(prompt_lens=(1, 5), n=3).batch
    one_token = batch.clone()
    one_token["attention_mask"][:, PROMPT_LEN + 1 :] = 0
    one_token["responses"] = one_token["responses"] * one_token["attention_mask"][:, PROMPT_LEN:]
    for case in (batch, one_token):
        mask = case["attention_mask"][:, PROMPT_LEN:].bool()
        with torch.no_grad():
            plain = forward_response(model, case, False, token_fn)
            shared = forward_response(model, case, False, token_fn, share_prompt_prefix=True)
        for got, want in zip(shared, plain):
            torch.testing.assert_close(got[mask], want[mask], rtol=1e-5, atol=1e-5)


def _actor_config(make_actor_config, share: bool):
    config = make_actor_config(ppo_mini_batch_size=12, ppo_micro_batch_size_per_gpu=6)
    config.share_prompt_prefix = share
    return config


def _update(model, config, data):
    model = copy.deepcopy(model)
    actor = DataParallelPPOActor(config, model, torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0))
    metrics = actor.update_policy(data)
    return model, metrics


def test_actor_log_probs_and_update_equal_the_padded_actor(causal_lm, make_actor_config):
    data = grouped_batch()
    data.meta_info.update(micro_batch_size=6)
    plain_actor = DataParallelPPOActor(_actor_config(make_actor_config, False), causal_lm)
    shared_actor = DataParallelPPOActor(_actor_config(make_actor_config, True), causal_lm)
    assert shared_actor.share_prompt_prefix and not plain_actor.share_prompt_prefix
    mask = data.batch["response_mask"].bool()
    plain_lp, plain_ent = plain_actor.compute_log_prob(data, calculate_entropy=True)
    shared_lp, shared_ent = shared_actor.compute_log_prob(data, calculate_entropy=True)
    torch.testing.assert_close(shared_lp[mask], plain_lp[mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(shared_ent[mask], plain_ent[mask], rtol=1e-5, atol=1e-5)

    plain_model, plain_metrics = _update(causal_lm, _actor_config(make_actor_config, False), data)
    shared_model, shared_metrics = _update(causal_lm, _actor_config(make_actor_config, True), data)
    moved = max((a - b).abs().max().item() for a, b in zip(plain_model.parameters(), causal_lm.parameters()))
    diff = max((a - b).abs().max().item() for a, b in zip(plain_model.parameters(), shared_model.parameters()))
    assert moved > 1e-4 and diff < 1e-5, (moved, diff)  # as the packed-vs-padded update test
    torch.testing.assert_close(shared_metrics["actor/pg_loss"], plain_metrics["actor/pg_loss"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("common", [0, 3], ids=["no_common_prefix", "common_prefix"])
@pytest.mark.parametrize("strategy", ["fsdp2", "fsdp"])
def test_fsdp_actor_update_equals_the_padded_actor(tiny_model_dir, make_actor_config, strategy, common, any_prefix):
    """Two (three) forwards before one backward under FSDP (one gloo rank): the same update as the plain padded
    path."""
    from hybridrl.workers.engine import apply_fsdp, get_full_state_dict, load_hf_model

    data = grouped_batch(common=common)
    states = {}
    with single_rank_group():
        for share in (False, True):
            torch.manual_seed(0)
            module, _ = load_hf_model(tiny_model_dir)
            module = apply_fsdp(module, fsdp_config(), strategy=strategy)
            optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3, weight_decay=0.0)
            DataParallelPPOActor(_actor_config(make_actor_config, share), module, optimizer).update_policy(data)
            states[share] = get_full_state_dict(module)
    initial, _ = load_hf_model(tiny_model_dir)
    initial_state = initial.state_dict()
    for name, value in states[False].items():
        moved = (value - initial_state[name]).abs().max().item()
        torch.testing.assert_close(states[True][name], value, rtol=0, atol=max(1e-6, 1e-3 * moved))


def test_config_refuses_shared_prefix_with_packing():
    from config_testlib import compose_config

    from hybridrl.config.errors import ConfigError
    from hybridrl.config.validate import validate_config

    config = compose_config("ppo_trainer", ["actor_rollout_ref.model.share_prompt_prefix=True",
                          "actor_rollout_ref.model.use_remove_padding=True"])
    with pytest.raises(ConfigError, match="share_prompt_prefix.*use_remove_padding=False"):
        validate_config(config, check_env=False)


def _two_rank_update(rank: int, world_size: int, model_dir: str) -> dict:
    """One FSDP2 update on 2 gloo ranks, each with its own 12 rows, without and with the shared prompt."""
    from hybridrl.workers.engine import apply_fsdp, get_full_state_dict, load_hf_model
    from tests.workers.actor.conftest import actor_config

    shared_prefix.MIN_SAVED_POSITIONS = 1  # this rank's process: the prefix pass runs on the tiny batch too
    data = grouped_batch(seed=rank, common=3)
    states = {}
    for share in (False, True):
        torch.manual_seed(0)
        module, _ = load_hf_model(model_dir)
        module = apply_fsdp(module, fsdp_config(), strategy="fsdp2")
        optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3, weight_decay=0.0)
        config = actor_config(ppo_mini_batch_size=12, ppo_micro_batch_size_per_gpu=6)
        config.share_prompt_prefix = share
        DataParallelPPOActor(config, module, optimizer).update_policy(data)
        states[share] = get_full_state_dict(module)
    return states


@pytest.mark.slow
def test_two_rank_fsdp2_update_equals_the_padded_actor(tiny_model_dir):
    """Two FSDP2 ranks: gradients of both passes are reduced across ranks once per step, as in the plain path."""
    from tests.workers.engine.engine_testlib import run_ranks

    results = run_ranks(_two_rank_update, 2, tiny_model_dir)
    for name, value in results[0][False].items():
        torch.testing.assert_close(results[0][True][name], value, rtol=0, atol=1e-6)
        torch.testing.assert_close(results[1][True][name], value, rtol=0, atol=1e-6)


def _autograd_node_names(root: torch.Tensor) -> set[str]:
    """The class names of every node in ``root``'s backward graph."""
    names, seen, stack = set(), set(), [root.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        stack.extend(parent for parent, _ in node.next_functions)
    return names


def test_rows_repeat_through_index_select_not_advanced_indexing(tiny_model_dir, any_prefix):
    """Rows that share a prompt (and prompts that share the prefix) take its logits and cache rows through
    ``index_select``: advanced indexing's backward (``IndexBackward0``, an accumulating ``index_put_``) adds the
    copies' gradients concurrently on CPU in float32, so two fp32 runs of one seed parted (hf_cache.py)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model.train()
    batch = grouped_batch(common=3).batch
    outputs = forward_response_shared_prefix(model, batch, token_fn, lead=0, kept=5)
    nodes = _autograd_node_names(outputs[0].sum())
    assert "IndexSelectBackward0" in nodes
    assert "IndexBackward0" not in nodes
