"""Forward passes and micro-batching shared by the actor, the critic and the reward model.

Two input layouts give the same numbers on valid tokens:

- padded: ``model(input_ids [B,S], attention_mask [B,S], position_ids [B,S])``;
- packed (``use_remove_padding``): every valid token in one ``[1, nnz]`` row, ``attention_mask=None``
  and per-sequence ``position_ids`` restarting at 0 (see :mod:`hybridrl.utils.remove_padding`), plus the
  sequence bounds for the varlen attention (:mod:`hybridrl.models.transformers.varlen_attention`); with Ulysses
  sequence parallelism (a module marked by ``ulysses.mark_sequence_parallel``) each rank of the SP
  group runs a slice of that row and the per-token outputs are all-gathered (:mod:`hybridrl.utils.ulysses`).

Position ``t`` of the output scores token ``t+1``, so the response (the last ``R`` tokens) is read
from positions ``[-R-1, -1)``. Values at positions the response mask excludes are not comparable
between the two layouts (padded: score of a pad token; packed: 0 or the next packed sequence's
first token), exactly as in verl; callers mask them.

Notation:
    B: micro-batch size, S: padded length P+R, R: response length, V: vocab size, nnz: valid tokens.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from tensordict import TensorDict
from torch import nn

from hybridrl.models.families import FastPath, runs_fast_path
from hybridrl.models.multimodal import forward_response_with_images, uses_vision_forward
from hybridrl.models.transformers.varlen_attention import packed_attention_kwargs
from hybridrl.utils import ulysses
from hybridrl.utils.remove_padding import all_padding_columns, pack_sequences
from hybridrl.workers.actor.shared_prefix import forward_response_shared_prefix

__all__ = ["forward_packed_all_positions", "forward_response", "restore_order", "split_micro_batches"]

# token_fn(outputs [N, T, H], next_tokens [N, T], *token_inputs [N, T, ...]) -> per-token tensors, each [N, T, ...]
TokenFn = Callable[..., Sequence[torch.Tensor]]


def forward_response(
    module: nn.Module,
    micro_batch: TensorDict,
    use_remove_padding: bool,
    token_fn: TokenFn,
    share_prompt_prefix: bool = False,
    token_inputs: Sequence[torch.Tensor] = (),
) -> list[torch.Tensor]:
    """Run ``module`` on a micro-batch and map its per-position outputs to response positions.

    Args:
        module: HF model (causal LM or token classification), plain or FSDP-wrapped.
        micro_batch: holds ``input_ids, attention_mask, position_ids [B, S]`` and ``responses [B, R]``.
        use_remove_padding: pack the valid tokens into one row (padding-free forward).
        token_fn: turns the model's ``logits [N, T, H]`` and the ids they predict ``[N, T]`` (then each of
            ``token_inputs`` at the same positions) into per-token tensors ``[N, T]`` or ``[N, T, ...]`` (e.g.
            log-probs and entropies, values, top-k log-probs ``[N, T, K]``).
        share_prompt_prefix: padded layout, causal LMs: run each distinct prompt once and hand its KV cache
            to the rows that share it (:mod:`hybridrl.workers.actor.shared_prefix`); the same numbers. Not
            with ``token_inputs`` (the plain padded forward runs).
        token_inputs: per response token inputs ``[B, R, ...]`` handed to ``token_fn`` aligned with
            ``next_tokens`` (e.g. a teacher's top-k ids to gather the student's log-probs at).

    Returns:
        Each tensor of ``token_fn`` at the response positions: ``[B, R]`` (``[B, R, ...]``).
    """
    if uses_vision_forward(micro_batch):  # images or mrope positions: hybridrl/models/multimodal.py
        return forward_response_with_images(module, micro_batch, _with_inputs(token_fn, token_inputs),
                                            use_remove_padding)
    response_length = micro_batch["responses"].shape[-1]
    input_ids = micro_batch["input_ids"]
    attention_mask = micro_batch["attention_mask"]
    position_ids = micro_batch["position_ids"]
    if use_remove_padding:
        packed = pack_sequences(input_ids, attention_mask, position_ids)
        # the token each packed position predicts; the last token of a sequence gets the next
        # sequence's first token, which lands on a position outside the response mask.
        next_tokens = torch.roll(packed.input_ids, shifts=-1, dims=1)  # [1, nnz]
        packed_inputs = [_pack_response_inputs(values, packed) for values in token_inputs]  # each [1, nnz, ...]
        sp_group = ulysses.sequence_parallel_group_of(module)
        if sp_group is not None and dist.get_world_size(sp_group) > 1:
            per_token = _forward_packed_sp(module, packed, next_tokens, token_fn, sp_group, packed_inputs)
        else:
            per_token = _forward_packed(module, packed, next_tokens, token_fn, response_length, packed_inputs)
        return [packed.pad(values.squeeze(0))[:, -response_length - 1 : -1] for values in per_token]
    lead, trail = skipped_columns(attention_mask, response_length)
    kept = response_length - trail  # R' response columns that hold a token in some row
    if (share_prompt_prefix and not token_inputs and _keeps_logits(module)
            and runs_fast_path(module, FastPath.SHARED_PREFIX)):
        per_token = forward_response_shared_prefix(module, micro_batch, token_fn, lead, kept)
        if per_token is not None:
            return [_pad_response(values, trail) for values in per_token]
    columns = slice(lead, attention_mask.shape[1] - trail)
    kwargs = {"logits_to_keep": kept + 1} if _keeps_logits(module) else {}
    output = module(
        input_ids=input_ids[:, columns],
        attention_mask=attention_mask[:, columns],
        position_ids=position_ids[:, columns],
        use_cache=False,
        **kwargs,
    )
    logits = output.logits[:, -kept - 1 : -1]  # [B, R', H]
    per_token = token_fn(logits, micro_batch["responses"][:, :kept], *(values[:, :kept] for values in token_inputs))
    return [_pad_response(values, trail) for values in per_token]  # [B, R, ...], 0 past every response


def _pad_response(values: torch.Tensor, trail: int) -> torch.Tensor:
    """``[B, R', ...]`` → ``[B, R' + trail, ...]`` with zeros."""
    return torch.nn.functional.pad(values, (0, 0) * (values.dim() - 2) + (0, trail))


def _with_inputs(token_fn: TokenFn, token_inputs: Sequence[torch.Tensor]) -> TokenFn:
    """``token_fn`` with ``token_inputs`` (already aligned with its ``next_tokens``) appended to its arguments."""
    if not token_inputs:
        return token_fn
    return lambda logits, next_tokens: token_fn(logits, next_tokens, *token_inputs)


def _pack_response_inputs(values: torch.Tensor, packed: Any) -> torch.Tensor:
    """Response-aligned ``[B, R, ...]`` → ``[1, nnz, ...]`` at the packed positions that predict each response
    token (the column before it); other positions hold 0."""
    batch, response_length = values.shape[:2]
    full = values.new_zeros((batch, packed.seqlen, *values.shape[2:]))
    full[:, packed.seqlen - response_length - 1 : packed.seqlen - 1] = values
    return full.flatten(0, 1)[packed.indices].unsqueeze(0)


def skipped_columns(attention_mask: torch.Tensor, response_length: int) -> tuple[int, int]:
    """Leading and trailing columns of ``attention_mask [B, S]`` the padded forward skips.

    They are padding in every row: prompts left-padded to ``max_prompt_length`` and responses that all end
    before ``R`` cost nothing. Causal attention makes the outputs on the other columns the same. The last
    prompt column and at least one response column are kept.
    """
    lead, trail = all_padding_columns(attention_mask)
    return min(lead, attention_mask.shape[1] - response_length - 1), min(trail, response_length - 1)


def _keeps_logits(module: nn.Module) -> bool:
    """Whether the model's forward takes ``logits_to_keep`` (HF causal LMs; not token classifiers).

    With it the LM head runs on the response positions only: on a 64-token prompt and a 16-token
    response that skips 80% of the ``[T, H] x [H, V]`` head matmul, in forward and backward.
    """
    inner = getattr(module, "module", module)  # FSDP1 wraps; FSDP2 keeps the class
    return _forward_takes_logits_to_keep(type(inner))


@functools.cache
def _forward_takes_logits_to_keep(model_class: type) -> bool:
    """The signature check of :func:`_keeps_logits`, once per model class (it is asked every micro-batch)."""
    try:
        return "logits_to_keep" in inspect.signature(model_class.forward).parameters
    except (TypeError, ValueError):
        return False


def _forward_packed(
    module: nn.Module, packed: Any, next_tokens: torch.Tensor, token_fn: TokenFn, response_length: int,
    token_inputs: Sequence[torch.Tensor] = (),
) -> list[torch.Tensor]:
    """Packed forward; the head runs only on positions that score a response token when the model allows it.

    Returns per-token tensors ``[1, nnz, ...]``; positions outside the response window hold 0 (masked by callers).
    """
    if not _keeps_logits(module):
        output = module(**_packed_inputs(module, packed))
        return list(token_fn(output.logits, next_tokens, *token_inputs))
    column = packed.indices % packed.seqlen  # [nnz] column of each packed token in the padded batch
    window = (column >= packed.seqlen - response_length - 1) & (column < packed.seqlen - 1)
    keep = torch.nonzero(window, as_tuple=False).flatten()  # [K]
    output = module(**_packed_inputs(module, packed), logits_to_keep=keep)
    nnz = packed.input_ids.shape[1]
    per_token = []
    for values in token_fn(output.logits, next_tokens[:, keep], *(inputs[:, keep] for inputs in token_inputs)):
        full = values.new_zeros((1, nnz, *values.shape[2:]))  # values: [1, K, ...]
        per_token.append(full.index_put((torch.zeros_like(keep), keep), values.squeeze(0)))
    return per_token


def forward_packed_all_positions(module: nn.Module, packed: Any, token_fn: TokenFn) -> list[torch.Tensor]:
    """Per-token outputs ``[1, nnz]`` on every position of a packed row (e.g. a reward model's scores).

    Runs Ulysses-sliced and all-gathered when ``module`` is marked with an SP group of size > 1.
    """
    next_tokens = torch.roll(packed.input_ids, shifts=-1, dims=1)  # [1, nnz]
    sp_group = ulysses.sequence_parallel_group_of(module)
    if sp_group is not None and dist.get_world_size(sp_group) > 1:
        return _forward_packed_sp(module, packed, next_tokens, token_fn, sp_group)
    output = module(**_packed_inputs(module, packed))
    return list(token_fn(output.logits, next_tokens))


def _packed_inputs(module: nn.Module, packed: Any) -> dict[str, Any]:
    """Forward kwargs of a packed row ``[1, nnz]``: no padding mask, restarting positions, and the sequence
    bounds for the varlen attention (:mod:`hybridrl.models.transformers.varlen_attention`) when the model runs it."""
    return {
        "input_ids": packed.input_ids, "attention_mask": None, "position_ids": packed.position_ids,
        "use_cache": False, **packed_attention_kwargs(module, packed.cu_seqlens),
    }


def _forward_packed_sp(
    module: nn.Module, packed: Any, next_tokens: torch.Tensor, token_fn: TokenFn, group: Any,
    token_inputs: Sequence[torch.Tensor] = (),
) -> list[torch.Tensor]:
    """Ulysses: this rank runs ``[1, nnz_pad/sp]`` of the packed row; per-token outputs are gathered to ``[1, nnz]``."""
    sp_size, sp_rank = dist.get_world_size(group), dist.get_rank(group)
    ids, pos, pad = ulysses.ulysses_pad_and_slice_inputs(packed.input_ids, packed.position_ids, sp_size, sp_rank)
    local_next, _, _ = ulysses.ulysses_pad_and_slice_inputs(next_tokens, None, sp_size, sp_rank)
    local_inputs = [ulysses.ulysses_pad_and_slice_inputs(values, None, sp_size, sp_rank)[0] for values in token_inputs]
    output = module(input_ids=ids, attention_mask=None, position_ids=pos, use_cache=False)
    return [
        ulysses.gather_outputs_and_unpad(values, gather_dim=1, padding_size=pad, group=group)
        for values in token_fn(output.logits, local_next, *local_inputs)
    ]


def split_micro_batches(
    batch: TensorDict, micro_batch_size: int | None, use_dynamic_bsz: bool, max_token_len: int | None
) -> tuple[list[TensorDict], list[int] | None]:
    """Micro-batches of fixed size, or token-budget ones (``use_dynamic_bsz``).

    Returns:
        ``(micro_batches, order)``; ``order`` lists the original row index of each row of the
        concatenated micro-batches (``None`` when rows keep their order).
    """
    if use_dynamic_bsz:
        if not max_token_len:
            raise ValueError("use_dynamic_bsz needs a positive max token length (ppo/log_prob_max_token_len_per_gpu).")
        from hybridrl.utils.seqlen_balancing import rearrange_micro_batches

        micro_batches, index_groups = rearrange_micro_batches(batch, max_token_len=max_token_len)
        return list(micro_batches), list(itertools.chain.from_iterable(index_groups))
    if not micro_batch_size or micro_batch_size <= 0:
        raise ValueError(
            f"micro batch size must be a positive int when use_dynamic_bsz=False, got {micro_batch_size!r}; "
            "set *_micro_batch_size_per_gpu."
        )
    return list(batch.split(micro_batch_size)), None


def restore_order(values: torch.Tensor, order: list[int] | None) -> torch.Tensor:
    """Undo the row permutation of :func:`split_micro_batches`: ``values[k]`` belongs to row ``order[k]``."""
    if order is None:
        return values
    if len(order) != values.shape[0]:
        raise ValueError(f"restore_order: {len(order)} indices for {values.shape[0]} rows")
    from hybridrl.utils.seqlen_balancing import get_reverse_idx

    reverse = torch.tensor(get_reverse_idx(order), dtype=torch.long, device=values.device)
    return values[reverse]
