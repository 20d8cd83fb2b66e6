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

Notation: B rows, G distinct prompts, P prompt columns (P' after dropping columns that are padding in
every row), R response columns (R' after dropping trailing all-padding columns), V vocabulary.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from hybridrl.utils.hf_cache import cache_kwarg, output_cache
from hybridrl.utils.padding import prompt_groups

__all__ = ["forward_response_shared_prefix"]


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
        does not apply (no repeated prompt, gradient checkpointing): the caller runs the plain padded forward.
    """
    responses = micro_batch["responses"]
    input_ids, attention_mask = micro_batch["input_ids"], micro_batch["attention_mask"]
    position_ids = micro_batch["position_ids"]
    prompt_end = input_ids.shape[1] - responses.shape[1]  # P
    if _recomputes_activations(module):
        return None
    groups = prompt_groups(input_ids[:, :prompt_end], attention_mask[:, :prompt_end])
    if groups is None:
        return None
    first_rows, group_of_row = groups
    prompt = slice(lead, prompt_end)
    # prompt pass: its last position scores response token 0. The loss depends on these logits, so the
    # gradient reaches every layer's output of this pass too (FSDP's pre-backward hooks hang there).
    first_logits, cache = _prompt_pass(
        module, input_ids[first_rows, prompt], attention_mask[first_rows, prompt], position_ids[first_rows, prompt]
    )
    per_token = [list(token_fn(first_logits[group_of_row], responses[:, :1]))]  # each [B, 1]
    if kept > 1:
        cache.batch_select_indices(group_of_row)  # [G, ...] -> [B, ...]; backward sums over each prompt's rows
        scored = slice(prompt_end, prompt_end + kept - 1)  # response tokens 0..R'-2 score tokens 1..R'-1
        output = module(
            input_ids=input_ids[:, scored],
            attention_mask=attention_mask[:, lead : prompt_end + kept - 1],
            position_ids=position_ids[:, scored],
            use_cache=True,
            **cache_kwarg(module, cache),
        )
        per_token.append(list(token_fn(output.logits, responses[:, 1:kept])))  # each [B, R'-1]
    return [torch.cat(parts, dim=1) for parts in zip(*per_token)]


def _prompt_pass(
    module: nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, prompt_positions: torch.Tensor
) -> tuple[torch.Tensor, Any]:
    """Logits ``[G, 1, V]`` of the last prompt position and the KV cache ``[G, kvh, P', d]`` per layer."""
    output = module(
        input_ids=prompt_ids,
        attention_mask=prompt_mask,
        position_ids=prompt_positions,
        use_cache=True,
        logits_to_keep=1,
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
