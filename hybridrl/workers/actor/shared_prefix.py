"""Shared-prompt forward: each distinct prompt of a micro-batch runs once (``model.share_prompt_prefix``).

GRPO, RLOO and the other group estimators sample ``n`` responses per prompt, and the padded forward
computes the prompt's positions once per row: ``n`` times the same work. Under causal attention a
prompt's hidden states do not depend on what follows it, so the prompt runs once per distinct prompt and
its keys/values reach every row that shares it through the model's KV cache:

    prompt pass:    model(prompt columns [G, P'])          -> logits of the last column [G, 1, V] (scores
                                                              response token 0), cache per layer [G, kvh, P', d]
    expand:         cache rows -> each prompt's rows        -> [B, kvh, P', d]
    response pass:  model(responses[:, :R'-1], cache)       -> logits [B, R'-1, V] (score tokens 1..R'-1)

These are the padded forward's logits at the positions that score the response tokens, so log-probs,
entropies and their gradients are the same up to float summation order; in backward the row selection sums
each prompt's gradient over its rows. On the quickstart's shapes (4 prompts × 8 samples, 46-token prompts,
16-token responses) the transformer runs on 4·46 + 32·15 = 664 positions instead of 32·62 = 1984.

Chat prompts also share a prefix *across* prompts: the chat template's system turn and the instruction's
first words (the quickstart's 46-token prompts begin with the same 30 tokens). When the distinct prompts share
L ≥ 1 leading tokens and skipping them saves at least ``MIN_SAVED_POSITIONS`` positions, that prefix runs once
more upstream, and each distinct prompt runs only its own tail:

    prefix pass:    model(common prefix [1, L])             -> cache per layer [1, kvh, L, d]
    expand:         1 -> G
    prompt pass:    model(prompt tails [G, P'-L], cache)    -> as above, cache [G, kvh, P', d]

The tails are the prompts' last P'-L columns (left padding stays left, so a shorter prompt's window starts
inside its own prefix: those columns are masked, as are the columns of the prefix that a tail repeats). Position
ids are the padded forward's, so every real token sees the same keys at the same positions. The prefix pass's
one logit enters the loss with weight 0: its backward reaches that pass's last layer (FSDP's hooks hang there).
L is capped so that every prompt keeps at least one token of its own (its last position scores response token 0).
On the quickstart (16 prompts × 4 samples) the prompt positions drop from 16·46 = 736 to 30 + 16·16 = 286.

Notation: B rows, G distinct prompts, P prompt columns (P' after dropping columns that are padding in
every row), R response columns (R' after dropping trailing all-padding columns), V vocabulary, L common prefix.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from hybridrl.models.transformers.hf_cache import cache_kwarg, output_cache, select_cache_rows
from hybridrl.utils.remove_padding import common_prefix_length, prefix_first_mask, prompt_groups

__all__ = ["forward_response_shared_prefix"]

# a prefix pass costs one more (small) forward and backward through every layer: run it only when it saves
# at least this many positions, (G - 1) · L
MIN_SAVED_POSITIONS = 16


def forward_response_shared_prefix(
    module: nn.Module, micro_batch: Any, token_fn: Any, lead: int, kept: int
) -> list[torch.Tensor] | None:
    """The padded forward of :func:`hybridrl.workers.actor.forward.forward_response`, each prompt run once.

    Args:
        module: HF causal LM (plain or FSDP-wrapped) whose forward takes a KV cache and ``logits_to_keep``.
        micro_batch: ``input_ids, attention_mask, position_ids [B, P+R]`` and ``responses [B, R]``.
        token_fn: maps ``logits [N, T, V]`` and the tokens they score ``[N, T]`` to per-token tensors ``[N, T]``.
        lead: leading prompt columns that are padding in every row (skipped).
        kept: response columns that hold a token in some row (``R'``).

    Returns:
        Each tensor of ``token_fn`` on the kept response columns ``[B, R']``; ``None`` when the shared path
        does not apply (no repeated prompt and no common prefix worth a pass, gradient checkpointing): the
        caller runs the plain padded forward.
    """
    responses = micro_batch["responses"]
    input_ids, attention_mask = micro_batch["input_ids"], micro_batch["attention_mask"]
    position_ids = micro_batch["position_ids"]
    prompt_end = input_ids.shape[1] - responses.shape[1]  # P
    if _recomputes_activations(module):
        return None
    first_rows, group_of_row = _distinct_prompts(input_ids[:, :prompt_end], attention_mask[:, :prompt_end])
    prompt = slice(lead, prompt_end)
    prompt_ids, prompt_mask = input_ids[first_rows, prompt], attention_mask[first_rows, prompt]  # [G, P']
    prefix = common_prefix_length(prompt_ids, prompt_mask)
    if len(first_rows) > 1 and (len(first_rows) - 1) * prefix < MIN_SAVED_POSITIONS:
        prefix = 0
    if len(first_rows) == input_ids.shape[0] and prefix == 0:
        return None  # nothing shared
    # prompt pass (after the prefix pass, if any): its last position scores response token 0. The loss depends
    # on these logits, so the gradient reaches every layer's output of this pass too (FSDP's pre-backward hooks)
    cache, anchor = None, None
    if prefix:
        start = prompt_ids.shape[1] - int(prompt_mask[0].sum())  # the first distinct prompt's first token
        anchor, cache = _prompt_pass(module, prompt_ids[:1, start : start + prefix],
                                     prompt_mask[:1, start : start + prefix],
                                     position_ids[first_rows[:1], lead + start : lead + start + prefix])
        select_cache_rows(cache, torch.zeros(len(first_rows), dtype=torch.long, device=input_ids.device))
        prompt_mask = prefix_first_mask(prompt_mask, prefix)  # [G, P']: ones on the cached prefix, then each tail
    first_logits, cache = _prompt_pass(
        module, prompt_ids[:, prefix:], prompt_mask, position_ids[first_rows, lead + prefix : prompt_end], cache
    )
    # index_select, not first_logits[group_of_row]: its backward is deterministic on CPU (hf_cache.select_cache_rows)
    per_token = [list(token_fn(first_logits.index_select(0, group_of_row), responses[:, :1]))]  # each [B, 1]
    if anchor is not None and torch.is_grad_enabled():
        per_token[0][0] = per_token[0][0] + 0.0 * anchor.float().sum().clamp(-1.0, 1.0)  # 0, also for inf logits
    if kept > 1:
        select_cache_rows(cache, group_of_row)  # [G, ...] -> [B, ...]; backward sums over each prompt's rows
        scored = slice(prompt_end, prompt_end + kept - 1)  # response tokens 0..R'-2 score tokens 1..R'-1
        output = module(
            input_ids=input_ids[:, scored],
            attention_mask=torch.cat([prompt_mask[group_of_row], attention_mask[:, scored]], dim=1),
            position_ids=position_ids[:, scored],
            use_cache=True,
            **cache_kwarg(module, cache),
        )
        per_token.append(list(token_fn(output.logits, responses[:, 1:kept])))  # each [B, R'-1]
    return [torch.cat(parts, dim=1) for parts in zip(*per_token)]


def _distinct_prompts(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(first_rows [G], group_of_row [B])`` of ``prompt_groups``; every row its own group when none repeats."""
    groups = prompt_groups(prompt_ids, prompt_mask)
    if groups is not None:
        return groups
    rows = torch.arange(prompt_ids.shape[0], device=prompt_ids.device)
    return rows, rows


def _prompt_pass(
    module: nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, prompt_positions: torch.Tensor,
    cache: Any = None,
) -> tuple[torch.Tensor, Any]:
    """Logits ``[G, 1, V]`` of the last prompt position and the KV cache ``[G, kvh, P', d]`` per layer
    (``prompt_mask`` covers ``cache``'s columns, then ``prompt_ids``'s)."""
    output = module(
        input_ids=prompt_ids,
        attention_mask=prompt_mask,
        position_ids=prompt_positions,
        use_cache=True,
        logits_to_keep=1,
        **(cache_kwarg(module, cache) if cache is not None else {}),
    )
    cache = output_cache(output)
    if cache is None:
        raise RuntimeError(
            f"{type(getattr(module, 'module', module)).__name__} returned no KV cache with use_cache=True: "
            "set actor_rollout_ref.model.share_prompt_prefix=False for this model."
        )
    return output.logits, cache


def _recomputes_activations(module: nn.Module) -> bool:
    """HF models drop ``use_cache`` under gradient checkpointing in training: the shared path needs the cache."""
    inner = getattr(module, "module", module)
    flag = "is_activation_checkpointing" if hasattr(type(inner), "is_activation_checkpointing") else (
        "is_gradient_checkpointing")  # transformers 5.25 renamed it
    return bool(getattr(inner, flag, False)) and inner.training
