"""Rows whose every advantage is 0 add nothing to the policy gradient: the update leaves them out, exactly.

GRPO's advantage is ``(r − mean_group) / (std_group + ε)``: a group whose samples all earn the same reward
(all right or all wrong) has advantage 0 on every token of every row. The PPO clip loss of a token is
``max(−A·ρ, −A·clip(ρ))`` (dual clip: ``min(…, −A·c)``), times rollout-correction weights when present: at
``A = 0`` its value and its gradient are 0 whatever the ratio ρ. So, without an entropy bonus and without a KL
loss, such a row changes only the loss's *denominator*, and that is the whole mini-batch's token / sequence
count over all ranks (global normalisation, ``global_batch.py``), computed before any row is dropped. On the quickstart's
2-digit additions a quarter to two thirds of the rows are in such groups (all wrong at the start, all right near
the end), and their forward and backward were pure cost.

Per micro-batch (the split stays as verl's):

    skipped = rows with ≥ 1 response token whose advantages are all exactly 0
    kept    = the other rows (one skipped row is kept when nothing else is, so that a micro-batch which must
              still run, see below, has a row; it adds a zero loss)
    loss    = loss(kept rows): a sum over the kept rows over the global count, which is the whole micro-batch's
              loss, since the skipped rows' terms are 0 (every ``loss_agg_mode``)

A micro-batch left with no row that counts runs no forward and backward at all when the same holds on every rank
(one all-reduce of a flag per micro-batch), except the mini-batch's first, which always runs: the optimizer then
sees gradients (zeros) as it would have, so Adam's moments and weight decay move exactly as before.

The gradient is the full micro-batch's (up to float summation order). Metrics: ``actor/pg_loss`` is the whole
micro-batch's as it is; ``actor/pg_clipfrac`` and ``actor/pg_clipfrac_lower`` (token means; a token at ``A = 0`` is
never clipped) by ``N_kept / N``, which makes them the whole micro-batch's exactly; ``actor/ppo_kl`` likewise,
counting the skipped tokens' ``old − new`` log-prob gap as 0: exact on-policy (the first pass over a step's
batch, or ``recompute_old_log_prob=False``), an underestimate for the later mini-batches and epochs of an
off-policy update. ``actor/zero_adv_skipped_frac`` is the share of the micro-batch's rows left out.

Off (every row runs, verl's behaviour) with ``actor.skip_zero_advantage_rows=False``, and whenever a term other
than the clip loss depends on every row: ``entropy_coeff ≠ 0``, ``use_kl_loss``, a ``policy_loss.loss_mode``
other than ``vanilla``, or rollout correction's bypass mode (its own loss).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from hybridrl.utils.device import current_device

__all__ = ["SKIPPED_FRACTION_METRIC", "SkippedRows", "drop_zero_advantage_rows", "micro_batches_to_run",
           "skips_zero_advantage_rows", "zero_advantage_rows"]

SKIPPABLE_LOSS_MODES = frozenset({"vanilla"})  # losses proportional to A token by token
TOKEN_MEAN_METRICS = ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower")
SKIPPED_FRACTION_METRIC = "actor/zero_adv_skipped_frac"


def skips_zero_advantage_rows(config: Any, bypass_mode: bool = False) -> bool:
    """Whether an update with ``actor_rollout_ref.actor`` ``config`` may leave zero-advantage rows out (see the
    module docstring for the conditions)."""
    return (
        bool(config.skip_zero_advantage_rows)
        and float(config.entropy_coeff) == 0.0
        and not config.use_kl_loss
        and config.policy_loss.loss_mode in SKIPPABLE_LOSS_MODES
        and not bypass_mode
    )


def zero_advantage_rows(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: rows with at least one response token whose advantages there are all exactly 0.

    Args:
        advantages: ``[B, R]``.
        response_mask: ``[B, R]`` (1 on response tokens). A row without response tokens is never skipped (under
            ``seq-mean-token-mean`` it is 0/0 in verl, and stays so).
    """
    on_tokens = response_mask.bool()
    return on_tokens.any(dim=-1) & ~((advantages != 0) & on_tokens).any(dim=-1)


@dataclass(frozen=True)
class SkippedRows:
    """A micro-batch's rows and response tokens, all (``rows``, ``tokens``) and those that count (``kept_*``; 0
    when every row was skipped: the one row that still runs has a zero loss)."""

    rows: int
    kept_rows: int
    tokens: int
    kept_tokens: int

    def rescale_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """The micro-batch's metrics as if every row had run (module docstring), plus the skipped share."""
        out = dict(metrics)
        for key in TOKEN_MEAN_METRICS:
            if key in out:
                out[key] *= self.kept_tokens / self.tokens
        out[SKIPPED_FRACTION_METRIC] = 1.0 - self.kept_rows / self.rows
        return out

    def metrics_without_rows(self) -> dict[str, float]:
        """The metrics of a micro-batch none of whose rows counts, which did not run: every loss and clip term 0."""
        return {"actor/pg_loss": 0.0, **dict.fromkeys(TOKEN_MEAN_METRICS, 0.0), SKIPPED_FRACTION_METRIC: 1.0}


def drop_zero_advantage_rows(micro_batch: Any) -> tuple[Any, SkippedRows | None]:
    """``micro_batch`` (``advantages, response_mask [B, R]`` among its keys) without its zero-advantage rows.

    Returns:
        ``(kept rows, SkippedRows)``, or ``(micro_batch, None)`` when no row is skipped. When every row is, one is
        kept (its loss and gradient are 0) so the micro-batch still runs forward and backward.
    """
    response_mask = micro_batch["response_mask"]
    skipped = zero_advantage_rows(micro_batch["advantages"], response_mask)
    if not bool(skipped.any()):
        return micro_batch, None
    keep = ~skipped
    all_skipped = not bool(keep.any())
    if all_skipped:
        keep[int(skipped.nonzero()[0])] = True
    rows = keep.nonzero().squeeze(-1)
    kept = micro_batch[rows]
    tokens = int(response_mask.sum())
    kept_tokens = 0 if all_skipped else int(response_mask[rows].sum())
    return kept, SkippedRows(rows=len(keep), kept_rows=0 if all_skipped else len(rows), tokens=tokens,
                             kept_tokens=kept_tokens)


def micro_batches_to_run(counts: list[bool]) -> list[bool]:
    """Which micro-batches of a mini-batch run forward and backward: those with a row that counts on some rank,
    and always the first (``counts[i]``: micro-batch i of this rank has one). Every rank gets the same answer (a
    MAX all-reduce of the flags), so FSDP's collectives stay paired."""
    flags = torch.tensor(counts, dtype=torch.int32)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        flags = flags.to(current_device())
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    run = [bool(flag) for flag in flags.tolist()]
    if run:
        run[0] = True
    return run
