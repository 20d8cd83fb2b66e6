"""Remove-padding ("rmpad") helpers: pack the valid tokens of a padded batch into one row and back.

verl's ``use_remove_padding`` path feeds the model a single ``[1, nnz]`` row holding every valid
token of the micro-batch, with ``position_ids`` that restart at 0 for each sequence. The model must
then attend only within each sequence. transformers >= 4.54 (5.x here) does that without
flash-attn: when ``attention_mask is None`` and no KV cache is used, ``masking_utils`` detects the
restarts in ``position_ids`` (``find_packed_sequence_indices``) and builds a dense block-diagonal causal
mask for the sdpa / eager kernels; its flash-attention integration derives ``cu_seqlens`` from the
same position ids. hybridrl's models run ``hybridrl_varlen`` instead of ``sdpa``
(:mod:`hybridrl.models.transformers.varlen_attention`): no dense mask, SDPA per sequence from ``cu_seqlens``. Here are
the index helpers (the flash-attn ``bert_padding`` functions verl imports, reimplemented in plain torch).

Notation:
    B: batch size, S: padded sequence length, nnz: number of valid (attended) tokens in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "PackedBatch", "all_padding_columns", "common_prefix_length", "pack_sequences", "pad_input", "prefix_first_mask",
    "prompt_groups", "unpad_input",
]


def all_padding_columns(attention_mask: torch.Tensor) -> tuple[int, int]:
    """``(leading, trailing)`` numbers of columns of ``attention_mask [B, S]`` that are padding in every row.

    ``(0, 0)`` when no row attends anything.
    """
    attended = attention_mask.bool().any(dim=0)  # [S]
    if not bool(attended.any()):
        return 0, 0
    columns = attended.nonzero().flatten()
    return int(columns[0]), attention_mask.shape[1] - 1 - int(columns[-1])


def prompt_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Rows that hold the same prompt.

    Args:
        prompt_ids: ``[B, P]`` left-padded prompt token ids.
        prompt_mask: ``[B, P]`` 1 on prompt tokens, 0 on padding.

    Returns:
        ``(first_rows [G], group_of_row [B])``: one row index per distinct prompt and each row's group
        (``first_rows[group_of_row[b]]`` holds the same prompt as row ``b``), or ``None`` when no two rows share
        a prompt (nothing to save).
    """
    keyed = prompt_ids.masked_fill(prompt_mask == 0, -1)  # pad ids differ between tokenizers: compare masks too
    _, group_of_row = torch.unique(keyed, dim=0, return_inverse=True)
    num_groups = int(group_of_row.max()) + 1
    if num_groups == keyed.shape[0]:
        return None
    rows = torch.arange(keyed.shape[0], device=keyed.device)
    first_rows = torch.full((num_groups,), keyed.shape[0], dtype=torch.long, device=keyed.device)
    first_rows.scatter_reduce_(0, group_of_row, rows, reduce="amin")
    return first_rows, group_of_row


def common_prefix_length(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> int:
    """Leading tokens every left-padded prompt shares, at most one less than the shortest prompt.

    Args:
        prompt_ids: ``[G, P]`` left-padded prompt ids (at least one row).
        prompt_mask: ``[G, P]`` 1 on prompt tokens, 0 on the left padding.

    Returns:
        L ≥ 0 such that every row's first L prompt tokens are the same; 0 for a single row, and when a mask is
        not left padding followed by tokens (then the prompts are not laid out as this module assumes).
    """
    rows, width = prompt_ids.shape
    lengths = prompt_mask.sum(dim=1)  # [G]
    columns = torch.arange(width, device=prompt_ids.device)
    if rows < 2 or not torch.equal(prompt_mask.bool(), columns >= (width - lengths)[:, None]):
        return 0
    shortest = int(lengths.min())
    starts = (width - lengths)[:, None]  # each prompt's first column
    aligned = prompt_ids.gather(1, (starts + columns[:shortest]).clamp(max=width - 1))  # [G, shortest]
    same = (aligned == aligned[:1]).all(dim=0)  # [shortest]
    differs = (~same).nonzero()
    shared = int(differs[0]) if len(differs) else shortest
    return min(shared, shortest - 1)


def prefix_first_mask(prompt_mask: torch.Tensor, prefix: int) -> torch.Tensor:
    """The mask of prompts whose common prefix was cached first, then their last ``P - L`` columns.

    Args:
        prompt_mask: ``[G, P]`` left-padded prompt mask (1 on tokens).
        prefix: L, the common prefix length (``common_prefix_length``), below every prompt's length.

    Returns:
        ``[G, P]``: ones on the L prefix columns, then 1 on each prompt's own tokens among its last ``P - L``
        columns (a shorter prompt's window reaches back into its prefix, already cached: masked).
    """
    width = prompt_mask.shape[1]
    tail_lengths = prompt_mask.sum(dim=1, keepdim=True) - prefix  # [G, 1], each ≥ 1
    columns = torch.arange(width - prefix, device=prompt_mask.device)
    tails = (columns >= (width - prefix) - tail_lengths).to(prompt_mask.dtype)
    return torch.cat([prompt_mask.new_ones((prompt_mask.shape[0], prefix)), tails], dim=1)


def unpad_input(
    hidden_states: torch.Tensor, attention_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Keep the attended positions of a padded batch.

    Args:
        hidden_states: ``[B, S, ...]`` (e.g. ``input_ids [B, S]`` or embeddings ``[B, S, D]``).
        attention_mask: ``[B, S]``, 1 for valid tokens (any padding side, holes allowed).

    Returns:
        ``(packed [nnz, ...], indices [nnz], cu_seqlens [B+1] int32, max_seqlen)`` where ``indices``
        are flat positions in ``B*S`` (row-major) and ``cu_seqlens`` the cumulative valid lengths.
    """
    seqlens = attention_mask.sum(dim=-1, dtype=torch.int32)  # [B]
    indices = torch.nonzero(attention_mask.flatten(), as_tuple=False).flatten()  # [nnz]
    max_seqlen = int(seqlens.max().item()) if seqlens.numel() else 0
    cu_seqlens = torch.nn.functional.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])  # [B*S, ...]
    return flat[indices], indices, cu_seqlens, max_seqlen


def pad_input(packed: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int) -> torch.Tensor:
    """Inverse of :func:`unpad_input`: scatter ``packed [nnz, ...]`` back to ``[B, S, ...]`` (zeros elsewhere).

    Differentiable with respect to ``packed`` (index_put on a fresh zero tensor).
    """
    output = torch.zeros(batch * seqlen, *packed.shape[1:], dtype=packed.dtype, device=packed.device)
    output = output.index_put((indices,), packed)
    return output.view(batch, seqlen, *packed.shape[1:])


@dataclass(frozen=True)
class PackedBatch:
    """A padded batch packed into one row for a padding-free forward.

    Attributes:
        input_ids: ``[1, nnz]`` valid tokens of all sequences, back to back.
        position_ids: ``[1, nnz]`` positions; each sequence restarts at 0 (this is what tells the
            attention kernels where one sequence ends and the next begins).
        indices: ``[nnz]`` flat positions in the padded ``[B, S]`` batch (for :func:`pad_input`).
        cu_seqlens: ``[B+1]`` cumulative sequence lengths.
        batch: ``B``; seqlen: ``S``.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    indices: torch.Tensor
    cu_seqlens: torch.Tensor
    batch: int
    seqlen: int

    def pad(self, packed: torch.Tensor) -> torch.Tensor:
        """``[nnz, ...]`` (or ``[1, nnz, ...]``) per-token values → ``[B, S, ...]`` padded with zeros."""
        if packed.dim() > 1 and packed.shape[0] == 1 and packed.shape[1] == self.indices.numel():
            packed = packed.squeeze(0)
        return pad_input(packed, self.indices, self.batch, self.seqlen)


def pack_sequences(input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> PackedBatch:
    """Pack a padded batch into a single row (verl's rmpad inputs).

    Args:
        input_ids: ``[B, S]`` token ids (left- and/or right-padded).
        attention_mask: ``[B, S]`` 1 for valid tokens.
        position_ids: ``[B, S]`` positions of the padded batch; valid tokens of each sequence must
            start at 0 and increase by 1 (``compute_position_id_with_mask`` gives exactly that).

    Returns:
        A :class:`PackedBatch` whose ``input_ids``/``position_ids`` are ``[1, nnz]``.

    Raises:
        ValueError: if a sequence's valid positions do not start at 0 — the attention kernels would
            then merge it with its neighbour, silently changing the result.
    """
    batch, seqlen = input_ids.shape
    packed_ids, indices, cu_seqlens, _ = unpad_input(input_ids.unsqueeze(-1), attention_mask)
    packed_pos, _, _, _ = unpad_input(position_ids.unsqueeze(-1), attention_mask)
    starts = cu_seqlens[:-1][cu_seqlens[1:] > cu_seqlens[:-1]].long()  # first token of each non-empty sequence
    if starts.numel() and bool((packed_pos[starts, 0] != 0).any()):
        raise ValueError(
            "use_remove_padding needs position_ids that restart at 0 for the first valid token of every "
            "sequence (e.g. compute_position_id_with_mask(attention_mask)); got first positions "
            f"{packed_pos[starts, 0].tolist()}."
        )
    return PackedBatch(
        input_ids=packed_ids.transpose(0, 1),  # [1, nnz]
        position_ids=packed_pos.transpose(0, 1),
        indices=indices,
        cu_seqlens=cu_seqlens,
        batch=batch,
        seqlen=seqlen,
    )
