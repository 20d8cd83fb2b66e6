"""Token sampling and an EOS-aware KV-cache decode loop for Hugging Face causal LMs.

``decode_batch`` is hybridrl's fast CPU path (``rollout.name=hf``). Compared with
``transformers.generate`` it:

- trims prompt columns that are padding in every row (left padding shared by the whole micro-batch);
- prefills each distinct prompt once: GRPO's ``n`` samples of a prompt are identical rows, so their KV
  cache and first-token logits are computed for one row and copied (prefill cost / ``n``);
- stops the whole batch as soon as every row has emitted an EOS;
- *compacts* the batch: once a quarter of the active rows are finished, they are dropped from the
  KV cache, so later steps only run the rows still generating;
- returns the log-prob of every sampled token under the full distribution at ``logprob_temperature``
  (see ``generation/sampling.py``), which costs one ``log_softmax`` per step and no second forward;
- writes keys/values in place into a preallocated cache (:mod:`hybridrl.models.transformers.preallocated_cache`)
  instead of transformers' ``torch.cat`` per step, and slices each step's attention mask from one precomputed
  ``[B, P + R]`` mask;
- samples by inverse CDF (``draw_inverse_cdf``, one uniform per row) instead of ``torch.multinomial`` (an
  exponential per vocabulary entry) when the vocabulary is large (``DecodeOptions.draw="auto"``, ≥ 8192 entries):
  same distribution, 10x cheaper on SmolLM2's 49k vocabulary (the multinomial draw was 14% of its decode), but
  other tokens for a given seed. Small vocabularies, where the draw costs nothing, keep ``torch.multinomial`` and
  so the seeded samples of earlier versions (a pinned-seed learning run on the tiny model,
  scripts/bench/bench_learning.py --runs rollout_correction, depends on them);
- runs a CPU fp32 model's large output head (≥ 8192 outputs) as a oneDNN matmul over a prepacked weight
  (:mod:`hybridrl.models.transformers.packed_head`: 2x on SmolLM2's 49152 × 576 head at 32 rows; equal up to float
  summation order).

``DecodeOptions`` switches the cache back to the unoptimised path for the equality tests and the benchmark's
``hf_before``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from hybridrl.generation.records import SamplingParams
from hybridrl.models.families import FastPath, runs_fast_path
from hybridrl.models.transformers.hf_cache import cache_kwarg
from hybridrl.models.transformers.packed_head import MIN_PACKED_VOCAB, packed_output_head
from hybridrl.models.transformers.upcast_attention import fp32_attention
from hybridrl.utils.remove_padding import all_padding_columns, common_prefix_length, prefix_first_mask, prompt_groups

_COMPACT_FRACTION = 0.25  # compact the KV cache when >= this fraction of active rows has finished
# draw="auto": inverse CDF from this vocabulary size on (multinomial's exponential per entry: ~24 ms per SmolLM2 step)
AUTO_INVERSE_CDF_MIN_VOCAB = 8192
# the prefill runs the distinct prompts' common prefix once (a batch of 1) when that saves at least this many
# positions, (G - 1) · L: below it the extra pass through every layer costs about what it saves
MIN_SAVED_PREFIX_POSITIONS = 16


@dataclass
class DecodeResult:
    """Generated ids and their log-probs, one list per input row (no padding, EOS included)."""

    token_ids: list[list[int]]
    log_probs: list[list[float]]


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Top-k then top-p (nucleus) filtering of ``[B, V]`` logits; removed entries become -inf.

    Top-p keeps the smallest prefix of the sorted distribution whose mass reaches ``top_p`` (the token
    that crosses the threshold is kept, so at least one token always survives).
    """
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(logits, dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # remove a token when the mass *before* it already reaches top_p
        remove_sorted = (cumulative - sorted_logits.softmax(dim=-1)) >= top_p
        remove = remove_sorted.scatter(-1, sorted_idx, remove_sorted)
        logits = logits.masked_fill(remove, float("-inf"))
    return logits


def draw_inverse_cdf(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of ``probs [B, V]`` (rows need not sum to 1) by inverse transform sampling.

    One uniform ``u`` per row is scaled to the row's mass and the first token whose cumulative mass exceeds it is
    taken, so token ``i`` is drawn with probability ``probs[i] / sum(probs)`` and a zero-probability token never
    is. Same distribution as ``torch.multinomial(probs, 1)``, but it draws ``B`` uniforms where multinomial
    draws ``B x V`` exponentials (an ``[32, 49152]`` draw costs about 10x the cumsum + search on this CPU), so a
    given seed gives different tokens than multinomial would.
    """
    cdf = probs.cumsum(dim=-1)
    total = cdf[:, -1:]
    uniform = torch.rand(total.shape, generator=generator, device=probs.device, dtype=cdf.dtype) * total
    uniform = torch.minimum(uniform, torch.nextafter(total, torch.zeros_like(total)))  # u < total: index < V
    return torch.searchsorted(cdf, uniform, right=True).squeeze(-1)


def sample_next_tokens(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None = None,
    draw: str = "multinomial",
    banned: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row from ``[B, V]`` logits.

    Args:
        draw: ``multinomial`` (``torch.multinomial``, what ``transformers.generate`` does; the default) or
            ``inverse_cdf`` (``draw_inverse_cdf``: same distribution, cheaper, other tokens for a given seed).
        banned: token ids that cannot be picked (the stop ids before ``params.min_new_tokens``); the
            log-probs stay those of the unfiltered distribution, like top-k / top-p.

    Returns:
        ``tokens [B]`` (int64) and ``log_probs [B]``: ``log_softmax(logits / T_lp)[token]`` on the
        unfiltered distribution, ``T_lp = params.logprob_temperature``.
    """
    logits = logits.float()
    allowed = logits if banned is None else logits.index_fill(-1, banned, float("-inf"))
    if params.greedy:
        tokens = allowed.argmax(dim=-1)
    else:
        probs = filter_logits(allowed / params.temperature, params.top_k, params.top_p).softmax(dim=-1)
        if draw == "inverse_cdf":
            tokens = draw_inverse_cdf(probs, generator)
        elif draw == "multinomial":
            tokens = torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)
        else:
            raise ValueError(f"DecodeOptions.draw must be 'multinomial' or 'inverse_cdf', got {draw!r}")
    log_probs = torch.log_softmax(logits / params.logprob_temperature, dim=-1)
    return tokens, log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def prefill_distinct_rows(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    cache: object,
) -> torch.Tensor:
    """Prefill the distinct rows of ``input_ids [B, P]`` once and expand ``cache`` to all ``B`` rows.

    Returns the next-token logits ``[B, V]`` of every row. The head runs on the last prompt position only.
    The cache's columns are the prompt's, so ``attention_mask`` stays the mask of later steps.
    """
    return prefill(model, input_ids, attention_mask, position_ids, cache, share_common_prefix=False)[0]


def prefill(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    cache: object,
    share_common_prefix: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``prefill_distinct_rows``, and (``share_common_prefix``) the prefix every distinct prompt shares run once.

    A chat template's system turn begins every prompt: when the G distinct prompts share L leading tokens and
    that saves ``(G - 1) · L ≥ MIN_SAVED_PREFIX_POSITIONS`` positions, the prefix runs once (a batch of 1),
    its cache is copied to the G rows, and each prompt runs its last ``P - L`` columns on top
    (``hybridrl.workers.actor.shared_prefix`` does the same in the update). The cache then holds the prefix
    first, so the returned mask, not ``attention_mask``, describes its columns.

    Returns:
        ``(logits [B, V], cache_mask [B, P])``: next-token logits of every row and the mask of the cache's columns.
    """
    groups = prompt_groups(input_ids, attention_mask)  # None: every row is its own prompt
    rows = torch.arange(input_ids.shape[0], device=input_ids.device)
    select, inverse = groups if groups is not None else (rows, rows)
    ids, mask, positions = input_ids[select], attention_mask[select], position_ids[select]
    prefix = common_prefix_length(ids, mask) if share_common_prefix else 0
    if (len(select) - 1) * prefix < MIN_SAVED_PREFIX_POSITIONS:
        prefix = 0
    if prefix:
        start = ids.shape[1] - int(mask[0].sum())  # the first distinct prompt's first token
        model(input_ids=ids[:1, start : start + prefix], attention_mask=mask[:1, start : start + prefix],
              position_ids=positions[:1, start : start + prefix], use_cache=True, logits_to_keep=1,
              **cache_kwarg(model, cache))
        cache.batch_select_indices(torch.zeros(len(select), dtype=torch.long, device=ids.device))
        mask = prefix_first_mask(mask, prefix)
        ids, positions = ids[:, prefix:], positions[:, prefix:]
    logits = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,  # [rows, 1, V]
        **cache_kwarg(model, cache),
    ).logits[:, -1]
    if groups is None:
        return logits, mask
    # cache row u holds distinct prompt u; row i of the batch is prompt inverse[i]
    cache.batch_select_indices(inverse)
    return logits[inverse], mask[inverse]


@dataclass(frozen=True)
class DecodeOptions:
    """Switches of the decode loop's optimisations. The defaults are the engine's; the alternatives are the
    unoptimised reference paths the equality tests run (tests/workers/rollout/test_decode_equality_on_cpu.py).

    Attributes:
        kv_cache: ``preallocated`` (``preallocated_cache.PreallocatedCache``: in-place writes; falls back to
            ``dynamic`` for sliding-window/hybrid models, families the model registry does not list for it and on
            transformers 4.x) or ``dynamic`` (transformers' ``DynamicCache``, a ``torch.cat`` per step).
        draw: ``auto`` (``inverse_cdf`` for vocabularies of ≥ ``AUTO_INVERSE_CDF_MIN_VOCAB`` entries, else
            ``multinomial``), ``multinomial`` (the seeded samples of every earlier version) or ``inverse_cdf``
            (see ``sample_next_tokens``).
        compact_fraction: drop finished rows from the cache once this fraction of the active rows has finished.
        packed_head: run a CPU output head of ≥ ``packed_head_min_vocab`` outputs over a prepacked oneDNN fp32
            weight (:mod:`hybridrl.models.transformers.packed_head`; fp32 logits for a bf16 model too); False:
            ``F.linear`` in the model's dtype.
        fp32_attention: a CPU bf16/fp16 model computes attention in fp32
            (:mod:`hybridrl.models.transformers.upcast_attention`: the bf16 CPU kernel is slower); False: the
            model's own attention.
        share_common_prefix: the prefill runs the prefix all distinct prompts share once (``prefill``); False:
            each distinct prompt runs whole.
    """

    kv_cache: str = "preallocated"
    draw: str = "auto"
    compact_fraction: float = _COMPACT_FRACTION
    packed_head: bool = True
    packed_head_min_vocab: int = MIN_PACKED_VOCAB
    fp32_attention: bool = True
    share_common_prefix: bool = True


def resolve_draw(draw: str, vocab_size: int) -> str:
    """``auto`` → ``inverse_cdf`` from ``AUTO_INVERSE_CDF_MIN_VOCAB`` entries on, else ``multinomial``."""
    if draw == "auto":
        return "inverse_cdf" if vocab_size >= AUTO_INVERSE_CDF_MIN_VOCAB else "multinomial"
    return draw


def _new_cache(model: nn.Module, kv_cache: str, capacity: int) -> object:
    from transformers import DynamicCache

    if kv_cache not in ("preallocated", "dynamic"):
        raise ValueError(f"DecodeOptions.kv_cache must be 'preallocated' or 'dynamic', got {kv_cache!r}")
    if kv_cache == "preallocated" and runs_fast_path(model, FastPath.PREALLOCATED_KV_CACHE):
        try:
            from hybridrl.models.transformers.preallocated_cache import preallocated_cache_or_none
        except ImportError:  # transformers 4.x (the Megatron environment) lacks the layer API: DynamicCache
            return DynamicCache()
        cache = preallocated_cache_or_none(model.config, capacity)
        if cache is not None:
            return cache
    return DynamicCache()


class _Recorder:
    """Sampled tokens and log-probs ``[B, R]`` of every row, written per step; a row's length stops growing
    once it has emitted a stop id."""

    def __init__(self, batch: int, max_new_tokens: int, device: torch.device) -> None:
        self.tokens = torch.zeros((batch, max_new_tokens), dtype=torch.long, device=device)
        self.log_probs = torch.zeros((batch, max_new_tokens), dtype=torch.float32, device=device)
        self.lengths = torch.zeros(batch, dtype=torch.long, device=device)

    def record(self, step: int, rows: torch.Tensor, tokens: torch.Tensor, log_probs: torch.Tensor,
               already_finished: torch.Tensor) -> None:
        self.tokens[rows, step] = tokens
        self.log_probs[rows, step] = log_probs.float()
        self.lengths[rows] += (~already_finished).long()  # rows are distinct

    def result(self) -> DecodeResult:
        tokens, log_probs, lengths = self.tokens.tolist(), self.log_probs.tolist(), self.lengths.tolist()
        return DecodeResult([t[:n] for t, n in zip(tokens, lengths)], [lp[:n] for lp, n in zip(log_probs, lengths)])


@torch.no_grad()
def decode_batch(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None = None,
    options: DecodeOptions = DecodeOptions(),
) -> DecodeResult:
    """Generate up to ``params.max_new_tokens`` tokens for each left-padded prompt row.

    Args:
        model: a Hugging Face causal LM (eval mode), on the device of ``input_ids``.
        input_ids: ``[B, P]`` left-padded prompt ids.
        attention_mask: ``[B, P]`` 1 on prompt tokens, 0 on left padding.
        params: resolved sampling parameters (stop ids, greedy/sampling, length).
        generator: RNG for sampling (None: torch's global RNG).
        options: which optimisations run (``DecodeOptions``; the defaults are the engine's).
    """
    packed_head = options.packed_head and runs_fast_path(model, FastPath.PACKED_HEAD)
    upcast = options.fp32_attention and runs_fast_path(model, FastPath.FP32_ATTENTION)
    with packed_output_head(model, packed_head, options.packed_head_min_vocab), fp32_attention(model, upcast):
        lead, _ = all_padding_columns(attention_mask)  # left padding shared by every row is not computed
        input_ids, attention_mask = input_ids[:, lead:], attention_mask[:, lead:].long()
        batch, prompt_width = input_ids.shape
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        eos = torch.tensor(params.eos_token_ids, device=input_ids.device)
        recorder = _Recorder(batch, params.max_new_tokens, input_ids.device)
        active = torch.arange(batch, device=input_ids.device)  # original row index of each cache row
        cache = _new_cache(model, options.kv_cache, prompt_width + params.max_new_tokens)
        logits, cache_mask = prefill(model, input_ids, attention_mask, position_ids, cache, options.share_common_prefix)
        # the mask of every step is a prefix of this one (the cache's prompt mask, then ones): no concatenation per step
        full_mask = torch.cat([cache_mask, cache_mask.new_ones((batch, params.max_new_tokens))], dim=-1)
        next_pos = position_ids[:, -1:] + 1
        finished = torch.zeros(batch, dtype=torch.bool, device=input_ids.device)
        draw = resolve_draw(options.draw, logits.shape[-1])
        for step in range(params.max_new_tokens):
            banned = eos if step < params.min_new_tokens else None  # rollout.min_tokens: no stop before it
            tokens, logps = sample_next_tokens(logits, params, generator, draw, banned)
            recorder.record(step, active, tokens, logps, finished)  # a finished, not yet compacted row records nothing
            if not params.ignore_eos:
                finished = finished | torch.isin(tokens, eos)
            if bool(finished.all()) or step == params.max_new_tokens - 1:
                break
            if int(finished.sum()) >= max(1, int(options.compact_fraction * len(active))):
                keep = (~finished).nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                active, tokens, full_mask, next_pos = active[keep], tokens[keep], full_mask[keep], next_pos[keep]
                finished = finished[keep]
            logits = model(
                input_ids=tokens.unsqueeze(-1),
                attention_mask=full_mask[:, : prompt_width + step + 1],
                position_ids=next_pos,
                use_cache=True,
                **cache_kwarg(model, cache),
            ).logits[:, -1]
            next_pos = next_pos + 1
        return recorder.result()
