"""Context parallelism's wiring in ``MegatronCausalLM`` on 2 gloo ranks (CP = 2), with a stand-in model.

The real CP path needs TransformerEngine's attention on a GPU (megatron-core's CPU attention asserts
``context_parallel_size == 1``), so no GPTModel runs here. What runs: megatron-core's parallel groups with CP = 2,
and ``MegatronCausalLM``'s CP forward around a token-wise stand-in that records what it is fed: the THD slice of
each rank (ids, positions, ``packed_seq_params``), the all-gather over the CP group back to the caller's layout
(padded and packed), and the gradient (each rank's piece, times CP; summed over CP and divided by DP × CP as
megatron-core's DDP does, it equals the gradient without CP).
"""

from __future__ import annotations

import torch
from torch import nn

from tests.megatron.megatron_testlib import megatron_section, run_ranks

VOCAB = 7


class _TokenwiseTHD(nn.Module):
    """``logits[t] = E[id_t] · (1 + position_t / 10)``: ``[1, T, V]`` from a THD row (no attention)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embedding = nn.Embedding(VOCAB, VOCAB)
        self.seen: list[dict] = []

    def forward(self, input_ids, position_ids, attention_mask, packed_seq_params=None):  # noqa: D102
        assert attention_mask is None and packed_seq_params.qkv_format == "thd"
        self.seen.append({"ids": input_ids.clone(), "positions": position_ids.clone(),
                          "cu": packed_seq_params.cu_seqlens_q_padded.clone(), "max": packed_seq_params.max_seqlen_q})
        return self.embedding(input_ids) * (1 + position_ids[..., None] / 10)


def _reference(module: _TokenwiseTHD, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    return module.embedding(ids) * (1 + positions[..., None] / 10)


def _cp_checks(rank: int) -> dict:
    from hybridrl.workers.megatron.model import MegatronCausalLM
    from hybridrl.workers.megatron.parallel import init_megatron_parallel

    section = megatron_section(1)
    section.context_parallel_size = 2
    info = init_megatron_parallel(section, "cpu")
    module = _TokenwiseTHD()
    causal_lm = MegatronCausalLM(module, vocab_size=VOCAB)
    out: dict = {"cp_rank": info.cp_rank, "cp_size": info.cp_size, "dp_size": info.dp_size}

    # one packed sequence of 8 tokens: rank 0 runs chunks 0 and 3, rank 1 chunks 1 and 2
    ids = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 0]])
    positions = torch.arange(8)[None]
    logits = causal_lm(ids, None, positions).logits
    out["one_ids"], out["one_cu"] = module.seen[-1]["ids"], module.seen[-1]["cu"]
    out["one_error"] = (logits - _reference(module, ids, positions)).abs().max()

    # padded layout: left-padded rows of 3 and 5 valid tokens (padded to 4 and 8 for 2·CP = 4 chunks)
    ids = torch.tensor([[0, 0, 3, 4, 5], [1, 2, 3, 4, 5]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    hf_positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = causal_lm(ids, mask, hf_positions).logits  # [2, 5, V]
    expected = _reference(module, ids, hf_positions) * mask[..., None]
    out["padded_error"] = (logits - expected).abs().max()
    out["padded_cu"], out["padded_max"] = module.seen[-1]["cu"], module.seen[-1]["max"]
    out["padded_local_ids"] = module.seen[-1]["ids"]

    # packed layout: the same two sequences in one row; gradient of a weighted sum, as a loss would take it
    packed_ids = torch.tensor([[3, 4, 5, 1, 2, 3, 4, 5]])
    packed_positions = torch.tensor([[0, 1, 2, 0, 1, 2, 3, 4]])
    weights = torch.arange(8 * VOCAB, dtype=torch.float32).reshape(1, 8, VOCAB)
    (causal_lm(packed_ids, None, packed_positions).logits * weights).sum().backward()
    out["cp_grad"] = module.embedding.weight.grad.clone()
    module.embedding.weight.grad = None
    (_reference(module, packed_ids, packed_positions) * weights).sum().backward()
    out["reference_grad"] = module.embedding.weight.grad.clone()
    return out


def test_cp2_slices_gathers_and_scales_gradients(tmp_path):
    ranks = run_ranks(_cp_checks, 2, tmp_path)
    assert [r["cp_rank"] for r in ranks] == [0, 1] and {r["cp_size"] for r in ranks} == {2}
    assert {r["dp_size"] for r in ranks} == {1}  # both ranks are one CP group: they share a data-parallel slice
    # hand-computed split of 0 1 2 3 4 5 6 0 into 4 chunks of 2
    assert ranks[0]["one_ids"].tolist() == [[0, 1, 6, 0]] and ranks[1]["one_ids"].tolist() == [[2, 3, 4, 5]]
    assert ranks[0]["one_cu"].tolist() == [0, 8]
    # rows of 3 and 5 → padded 4 and 8: chunks of 1 then 2; rank 0 gets [3 | pad] [1 2 | 0 0], rank 1 [4 5] [3 4 5 0]
    assert ranks[0]["padded_cu"].tolist() == [0, 4, 12] and ranks[0]["padded_max"] == 8
    assert ranks[0]["padded_local_ids"].tolist() == [[3, 0, 1, 2, 0, 0]]
    assert ranks[1]["padded_local_ids"].tolist() == [[4, 5, 3, 4, 5, 0]]
    for out in ranks:
        assert out["one_error"] == 0 and out["padded_error"] == 0  # every rank holds the full outputs
    # DDP sums over DP × CP = 2 ranks and divides by 2: equals the gradient without CP
    summed = (ranks[0]["cp_grad"] + ranks[1]["cp_grad"]) / 2
    torch.testing.assert_close(summed, ranks[0]["reference_grad"], rtol=1e-6, atol=1e-5)
    assert not torch.equal(ranks[0]["cp_grad"], ranks[1]["cp_grad"])  # each rank back-props its own piece
