"""Small, pure torch helpers: masked statistics, log-probs, entropy, masks and padding.

Numerics follow verl v0.5.0 ``verl/utils/torch_functional.py`` (same names and signatures), so
code ported from verl keeps its results. Nothing here imports another hybridrl module.

Notation:
    B: batch size, T: sequence length, V: vocabulary size, N: flattened rows (B*T).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

__all__ = [
    "calculate_sum_pi_squared_from_logits",
    "clip_by_value",
    "compute_position_id_with_mask",
    "entropy_from_logits",
    "entropy_from_logits_with_chunking",
    "gather_from_labels",
    "get_eos_mask",
    "get_response_mask",
    "log_probs_from_logits_response",
    "logprobs_from_logits",
    "logprobs_from_logits_naive",
    "logprobs_from_logits_v2",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "pad_2d_list_to_length",
    "pad_sequence_to_length",
    "postprocess_data",
    "remove_pad_token",
    "tokenize_and_postprocess_data",
]

# Added to the mask count in masked_mean so an all-zero mask gives 0 instead of NaN (verl v0.5).
_MASKED_MEAN_EPS = 1e-8
# Added to the variance before rsqrt in masked_whiten so constant inputs stay finite (verl).
_WHITEN_EPS = 1e-8
# Rows of [N, V] logits processed at once by the memory-aware log-prob path: bounds the
# temporary (rows x V) buffers that logsumexp / log_softmax allocate.
_LOGPROB_ROW_CHUNK = 1024

Axis = int | tuple[int, ...] | None


# ---------------------------------------------------------------------------
# Masked statistics
# ---------------------------------------------------------------------------


def masked_sum(values: torch.Tensor, mask: torch.Tensor, axis: Axis = None) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` is nonzero; NaN/inf outside the mask do not leak in.

    Args:
        values: any shape.
        mask: same shape as ``values`` (bool or 0/1 numeric).
        axis: dimension(s) to reduce; ``None`` reduces everything.
    """
    valid_values = torch.where(mask.bool(), values, torch.zeros_like(values))
    return (valid_values * mask).sum(dim=axis)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: Axis = None) -> torch.Tensor:
    """Mean of ``values`` over the selected elements: ``Σ(v·m) / (Σm + 1e-8)``.

    An empty mask yields 0 (not NaN), as in verl v0.5.
    """
    return masked_sum(values, mask, axis) / (mask.sum(dim=axis) + _MASKED_MEAN_EPS)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the selected elements (over all dims), optionally Bessel-corrected.

    ``var = mean_m((v - mean_m(v))²)``; unbiased multiplies by ``n / (n - 1)`` with ``n = Σm``.

    Raises:
        ValueError: if ``unbiased`` and the mask selects 0 or 1 elements.
    """
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        mask_sum = mask.sum()
        if mask_sum == 0:
            raise ValueError("masked_var: at least one element in the mask has to be 1.")
        if mask_sum == 1:
            raise ValueError(
                "masked_var: the mask selects exactly one element, so the unbiased variance divides by zero; "
                "use a larger (mini-)batch or unbiased=False."
            )
        variance = variance * (mask_sum / (mask_sum - 1))
    return variance


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Whiten with masked statistics: ``(v - μ) / sqrt(σ² + 1e-8)``; add ``μ`` back if not ``shift_mean``.

    Statistics come from the selected elements only; every element (masked or not) is transformed.
    """
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + _WHITEN_EPS)
    if not shift_mean:
        whitened = whitened + mean
    return whitened


def clip_by_value(x: torch.Tensor, tensor_min: torch.Tensor, tensor_max: torch.Tensor) -> torch.Tensor:
    """Elementwise ``min(max(x, tensor_min), tensor_max)`` with tensor bounds (``torch.clamp`` twin)."""
    return torch.max(torch.min(x, tensor_max), tensor_min)


# ---------------------------------------------------------------------------
# Log-probabilities and entropy
# ---------------------------------------------------------------------------


def gather_from_labels(data: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """``data[..., label]``: data ``[..., V]``, label ``[...]`` (int in ``[0, V)``) → ``[...]``."""
    return torch.gather(data, -1, label.unsqueeze(-1)).squeeze(-1)


def logprobs_from_logits_naive(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Reference: full ``log_softmax`` then gather. logits ``[..., V]``, labels ``[...]`` → ``[...]``."""
    return gather_from_labels(F.log_softmax(logits, dim=-1), labels)


def _logprob_rows(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log p(label) for a block of rows: logits ``[n, V]``, labels ``[n]`` → ``[n]``."""
    if logits.dtype in (torch.float32, torch.float64):
        # log_softmax(x)_y = x_y - logsumexp(x): only an [n] temporary besides logsumexp's work buffer.
        return gather_from_labels(logits, labels) - torch.logsumexp(logits, dim=-1)
    # logsumexp in bf16/fp16 loses too much precision (verl falls back the same way).
    return gather_from_labels(F.log_softmax(logits, dim=-1), labels)


def logprobs_from_logits_v2(
    logits: torch.Tensor, labels: torch.Tensor, row_chunk: int = _LOGPROB_ROW_CHUNK
) -> torch.Tensor:
    """Memory-aware log-probs: no full ``[..., V]`` log-softmax copy, rows processed in chunks.

    Args:
        logits: ``[..., V]`` (e.g. ``[B, T, V]`` or ``[N, V]``).
        labels: ``[...]`` integer token ids.
        row_chunk: rows of the flattened ``[N, V]`` view handled per step (bounds temporaries).

    Returns:
        ``[...]`` log-probabilities in ``logits.dtype``.
    """
    lead_shape = logits.shape[:-1]
    flat_logits = logits.reshape(-1, logits.shape[-1])
    flat_labels = labels.reshape(-1)
    if flat_logits.shape[0] <= row_chunk:
        return _logprob_rows(flat_logits, flat_labels).view(lead_shape)
    pieces = [
        _logprob_rows(flat_logits[start : start + row_chunk], flat_labels[start : start + row_chunk])
        for start in range(0, flat_logits.shape[0], row_chunk)
    ]
    return torch.cat(pieces).view(lead_shape)


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor, inplace_backward: bool = True) -> torch.Tensor:
    """log p(labels | logits). logits ``[..., V]``, labels ``[...]`` → ``[...]``.

    ``inplace_backward`` is accepted for verl signature parity; it only matters for verl's
    flash-attn cross-entropy kernel, which hybridrl does not use on CPU.
    """
    del inplace_backward
    return logprobs_from_logits_v2(logits, labels)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of ``softmax(logits)``: ``H = logsumexp(x) - Σ softmax(x)·x``. ``[..., V]`` → ``[...]``."""
    probs = F.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - torch.sum(probs * logits, dim=-1)


def entropy_from_logits_with_chunking(logits: torch.Tensor, chunk_size: int = 2048) -> torch.Tensor:
    """Entropy computed ``chunk_size`` rows at a time in float32 (as verl). ``[..., V]`` → ``[...]`` float32."""
    lead_shape = logits.shape[:-1]
    flat = logits.reshape(-1, logits.shape[-1])
    entropy = torch.zeros(flat.shape[0], dtype=torch.float32, device=logits.device)
    for start in range(0, flat.shape[0], chunk_size):
        entropy[start : start + chunk_size] = entropy_from_logits(flat[start : start + chunk_size].float())
    return entropy.view(lead_shape)


def calculate_sum_pi_squared_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Σ_v π(v)² of ``softmax(logits)`` (the optimal token baseline's variance proxy): ``[..., V]`` → ``[...]``.

    In log space, Σ_v π(v)² = exp(logsumexp(2x) − 2·logsumexp(x)), so large logits do not overflow.
    """
    return torch.exp(torch.logsumexp(2.0 * logits, dim=-1) - 2.0 * torch.logsumexp(logits, dim=-1))


def log_probs_from_logits_response(input_ids: torch.Tensor, logits: torch.Tensor, response_length: int) -> torch.Tensor:
    """Response log-probs from full-sequence logits (``logits = model(input_ids)``).

    Args:
        input_ids: ``[B, T]``; the last ``response_length`` tokens are the response.
        logits: ``[B, T, V]``; position t predicts token t+1, hence the ``-R-1:-1`` slice.

    Returns:
        ``[B, R]`` log-probabilities of the response tokens.
    """
    response_logits = logits[:, -response_length - 1 : -1]
    response = input_ids[:, -response_length:]
    return logprobs_from_logits(response_logits, response)


# ---------------------------------------------------------------------------
# Masks and positions
# ---------------------------------------------------------------------------


def get_response_mask(
    response_id: torch.Tensor, eos_token: int | Sequence[int] = 2, dtype: torch.dtype = torch.int64
) -> torch.Tensor:
    """1 up to and including the first EOS of each row, 0 after it.

    Example (eos_token=1)::

        response_id:   [0, 0, 2, 42, 3, 5, 1, 0, 0]
        response_mask: [1, 1, 1, 1,  1, 1, 1, 0, 0]

    Args:
        response_id: ``[B, R]`` token ids.
        eos_token: one id or a list of ids that all end a sequence.
        dtype: dtype of the returned mask.

    Returns:
        ``[B, R]`` mask; rows without any EOS are all ones.
    """
    eos_ids = [eos_token] if isinstance(eos_token, int) else list(eos_token)
    is_eos = torch.isin(response_id, torch.tensor(eos_ids, device=response_id.device)).int()
    # tokens strictly after the first EOS have a positive exclusive cumulative count.
    eos_before = is_eos.cumsum(dim=1) - is_eos
    return eos_before.eq(0).to(dtype)


# verl < 0.3 name, kept for code ported from older verl.
get_eos_mask = get_response_mask


def compute_position_id_with_mask(mask: torch.Tensor) -> torch.Tensor:
    """Position ids counting only attended tokens: ``clip(cumsum(mask) - 1, min=0)``.

    Left padding gets 0; e.g. mask ``[0, 0, 1, 1, 1]`` → ``[0, 0, 0, 1, 2]``.
    """
    return torch.clip(torch.cumsum(mask, dim=-1) - 1, min=0)


# ---------------------------------------------------------------------------
# Padding helpers
# ---------------------------------------------------------------------------


def pad_2d_list_to_length(
    response: Sequence[Sequence[Any]], pad_token_id: Any, max_length: int | None = None
) -> torch.Tensor:
    """Right-pad a ragged 2D list to a ``[B, L]`` tensor, ``L = max(max_length, longest row)``."""
    longest = max(len(row) for row in response)
    target_length = max_length if max_length is not None and max_length > longest else longest
    padded = [list(row) + [pad_token_id] * (target_length - len(row)) for row in response]
    return torch.tensor(padded)


def pad_sequence_to_length(
    tensors: torch.Tensor, max_seq_len: int, pad_token_id: float, left_pad: bool = False
) -> torch.Tensor:
    """Pad ``[B, T]`` along the last dim to ``max_seq_len`` (unchanged if already that long or longer)."""
    missing = max_seq_len - tensors.shape[-1]
    if missing <= 0:
        return tensors
    pad = (missing, 0) if left_pad else (0, missing)
    return F.pad(tensors, pad, "constant", pad_token_id)


_TRUNCATIONS = ("left", "right", "middle", "error")


def postprocess_data(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    max_length: int,
    pad_token_id: int,
    left_pad: bool = True,
    truncation: str = "error",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad or truncate ``[1, T]`` tokenizer output to exactly ``[1, max_length]``.

    truncation: ``left`` keeps the last tokens, ``right`` the first, ``middle`` keeps both ends
    (``max_length // 2`` first tokens + the rest from the end), ``error`` raises.
    """
    assert truncation in _TRUNCATIONS, f"truncation={truncation!r} is not one of {_TRUNCATIONS}"
    assert input_ids.ndim == 2, f"input_ids must be [B, T], got shape {list(input_ids.shape)}"
    sequence_length = input_ids.shape[-1]
    if sequence_length < max_length:
        input_ids = pad_sequence_to_length(input_ids, max_length, pad_token_id, left_pad=left_pad)
        attention_mask = pad_sequence_to_length(attention_mask, max_length, 0, left_pad=left_pad)
    elif sequence_length > max_length:
        if truncation == "error":
            raise NotImplementedError(
                f"{sequence_length=} is larger than {max_length=}; set truncation to left/right/middle"
            )
        input_ids, attention_mask = (_truncate(t, max_length, truncation) for t in (input_ids, attention_mask))
    return input_ids, attention_mask


def _truncate(tensor: torch.Tensor, max_length: int, truncation: str) -> torch.Tensor:
    if truncation == "left":
        return tensor[:, -max_length:]
    if truncation == "right":
        return tensor[:, :max_length]
    left_half = max_length // 2
    right_half = max_length - left_half
    return torch.cat([tensor[:, :left_half], tensor[:, -right_half:]], dim=-1)


def tokenize_and_postprocess_data(
    prompt: str,
    tokenizer: Any,
    max_length: int,
    pad_token_id: int,
    left_pad: bool = True,
    truncation: str = "error",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokenize one prompt (no special tokens) and pad/truncate it to ``[1, max_length]``."""
    encoded = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    return postprocess_data(
        encoded["input_ids"], encoded["attention_mask"], max_length, pad_token_id, left_pad, truncation
    )


def remove_pad_token(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[list[int]]:
    """Strip left padding: ``[B, T]`` ids and mask → per-row lists of the last ``Σmask`` ids."""
    rows: list[list[int]] = []
    for ids, mask in zip(input_ids, attention_mask):
        rows.append(ids[len(ids) - int(mask.sum()) :].cpu().tolist())
    return rows
