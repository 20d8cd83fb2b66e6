"""hybridrl.utils.torch_functional: hand-computed values and naive references."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from hybridrl.utils import torch_functional as tf

# ---------------------------------------------------------------------------- masked statistics


def test_masked_sum_and_mean_hand_computed() -> None:
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]])
    # selected: 1, 2, 5, 6 → sum 14, mean 14 / 4 = 3.5
    assert tf.masked_sum(values, mask).item() == 14.0
    assert tf.masked_mean(values, mask).item() == pytest.approx(3.5)
    # per row: (1+2)/2 = 1.5, (5+6)/2 = 5.5
    torch.testing.assert_close(tf.masked_mean(values, mask, axis=-1), torch.tensor([1.5, 5.5]))
    torch.testing.assert_close(tf.masked_sum(values, mask, axis=0), torch.tensor([1.0, 7.0, 6.0]))


def test_masked_mean_empty_mask_is_zero_and_nan_outside_mask_ignored() -> None:
    # v0.5 adds 1e-8 to the count: 0 / 1e-8 = 0 rather than NaN.
    assert tf.masked_mean(torch.ones(3), torch.zeros(3)).item() == 0.0
    values = torch.tensor([1.0, float("nan"), 3.0])
    mask = torch.tensor([1.0, 0.0, 1.0])
    assert tf.masked_mean(values, mask).item() == pytest.approx(2.0)  # (1 + 3) / 2


def test_masked_var_unbiased_and_biased() -> None:
    values = torch.tensor([1.0, 2.0, 3.0, 4.0, 100.0])
    mask = torch.tensor([1, 1, 1, 1, 0])
    # mean 2.5; squared deviations 2.25, 0.25, 0.25, 2.25 → sum 5; biased 5/4 = 1.25, unbiased 5/3
    assert tf.masked_var(values, mask, unbiased=False).item() == pytest.approx(1.25)
    assert tf.masked_var(values, mask).item() == pytest.approx(5 / 3)
    with pytest.raises(ValueError, match="at least one"):
        tf.masked_var(values, torch.zeros(5))
    with pytest.raises(ValueError, match="exactly one"):
        tf.masked_var(values, torch.tensor([1, 0, 0, 0, 0]))


def test_masked_whiten_hand_computed() -> None:
    values = torch.tensor([1.0, 2.0, 3.0, 50.0])
    mask = torch.tensor([1, 1, 1, 0])
    # mean 2, unbiased var ((1+0+1)/3)·(3/2) = 1 → (v - 2) / sqrt(1 + 1e-8)
    expected = (values - 2.0) / math.sqrt(1.0 + 1e-8)
    torch.testing.assert_close(tf.masked_whiten(values, mask), expected)
    torch.testing.assert_close(tf.masked_whiten(values, mask, shift_mean=False), expected + 2.0)


def test_clip_by_value_with_tensor_bounds() -> None:
    x = torch.tensor([-2.0, 0.5, 3.0])
    out = tf.clip_by_value(x, torch.tensor([-1.0, 1.0, 0.0]), torch.tensor([1.0, 2.0, 2.5]))
    assert out.tolist() == [-1.0, 1.0, 2.5]


# ---------------------------------------------------------------------------- log-probs / entropy


def test_logprobs_hand_computed() -> None:
    # logits [0, ln 3] → softmax [1/4, 3/4]; log p(1) = ln 0.75
    logits = torch.tensor([[0.0, math.log(3.0)]])
    assert tf.logprobs_from_logits(logits, torch.tensor([1])).item() == pytest.approx(math.log(0.75))


@pytest.mark.parametrize("shape", [(2, 7, 33), (5, 19), (3, 1, 1000)])
def test_logprobs_match_naive_log_softmax(shape: tuple[int, ...]) -> None:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(*shape, generator=generator) * 3
    labels = torch.randint(0, shape[-1], shape[:-1], generator=generator)
    expected = F.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(tf.logprobs_from_logits(logits, labels), expected)
    # the row-chunked path (chunks of 4 rows) gives the same values
    torch.testing.assert_close(tf.logprobs_from_logits_v2(logits, labels, row_chunk=4), expected)
    torch.testing.assert_close(tf.logprobs_from_logits_naive(logits, labels), expected)


def test_logprobs_fp32_never_builds_a_full_log_softmax(monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory-aware: fp32 logits [2, 7, 33] (14 rows) give log-probs without any [.., V] log-softmax copy,
    and logsumexp only ever sees a block of at most ``row_chunk`` rows."""
    generator = torch.Generator().manual_seed(7)
    logits = torch.randn(2, 7, 33, generator=generator)
    labels = torch.randint(0, 33, (2, 7), generator=generator)
    expected = F.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)

    def no_log_softmax(*args: object, **kwargs: object) -> torch.Tensor:
        raise AssertionError("fp32 log-probs must not materialise a full log_softmax")

    seen_rows: list[int] = []
    real_logsumexp = torch.logsumexp

    def recording_logsumexp(x: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        seen_rows.append(x.reshape(-1, x.shape[-1]).shape[0])
        return real_logsumexp(x, *args, **kwargs)

    monkeypatch.setattr(F, "log_softmax", no_log_softmax)
    monkeypatch.setattr(torch, "logsumexp", recording_logsumexp)
    torch.testing.assert_close(tf.logprobs_from_logits_v2(logits, labels, row_chunk=4), expected)
    assert seen_rows == [4, 4, 4, 2]  # 14 rows in blocks of 4
    torch.testing.assert_close(tf.logprobs_from_logits(logits, labels), expected)


def test_logprobs_bf16_within_tolerance_and_keeps_dtype() -> None:
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 6, 128, generator=generator)
    labels = torch.randint(0, 128, (4, 6), generator=generator)
    expected = F.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    out = tf.logprobs_from_logits_v2(logits.to(torch.bfloat16), labels, row_chunk=5)
    assert out.dtype == torch.bfloat16
    # bf16 keeps 8 mantissa bits: log-probs around -5 are exact to ~0.03.
    torch.testing.assert_close(out.float(), expected, atol=5e-2, rtol=2e-2)


def test_logprobs_gradient_matches_naive() -> None:
    generator = torch.Generator().manual_seed(2)
    base = torch.randn(3, 5, 11, generator=generator)
    labels = torch.randint(0, 11, (3, 5), generator=generator)
    a, b = base.clone().requires_grad_(), base.clone().requires_grad_()
    tf.logprobs_from_logits_v2(a, labels, row_chunk=4).sum().backward()
    tf.logprobs_from_logits_naive(b, labels).sum().backward()
    torch.testing.assert_close(a.grad, b.grad)


def test_entropy_hand_computed_and_vs_naive() -> None:
    # uniform over 4 tokens: H = ln 4
    assert tf.entropy_from_logits(torch.zeros(1, 4)).item() == pytest.approx(math.log(4.0))
    logits = torch.randn(3, 9, 50, generator=torch.Generator().manual_seed(3))
    probs = F.softmax(logits, dim=-1)
    naive = -(probs * F.log_softmax(logits, dim=-1)).sum(-1)
    torch.testing.assert_close(tf.entropy_from_logits(logits), naive)


def test_chunked_entropy_equals_unchunked() -> None:
    logits = torch.randn(2, 13, 40, generator=torch.Generator().manual_seed(4))
    chunked = tf.entropy_from_logits_with_chunking(logits, chunk_size=5)
    assert chunked.shape == (2, 13) and chunked.dtype == torch.float32
    torch.testing.assert_close(chunked, tf.entropy_from_logits(logits))
    flat = logits.reshape(-1, 40).to(torch.bfloat16)
    # bf16 input is upcast per chunk, so it matches fp32 entropy of the rounded logits
    torch.testing.assert_close(tf.entropy_from_logits_with_chunking(flat, 7), tf.entropy_from_logits(flat.float()))


def test_log_probs_from_logits_response_slices_shifted_positions() -> None:
    logits = torch.randn(2, 6, 10, generator=torch.Generator().manual_seed(5))
    input_ids = torch.randint(0, 10, (2, 6), generator=torch.Generator().manual_seed(6))
    out = tf.log_probs_from_logits_response(input_ids, logits, response_length=2)
    # response tokens at 4, 5 are predicted by logits at positions 3, 4
    full = F.log_softmax(logits, -1)
    expected = torch.stack([full[:, 3].gather(-1, input_ids[:, 4:5]), full[:, 4].gather(-1, input_ids[:, 5:6])], 1)
    torch.testing.assert_close(out, expected.squeeze(-1))


# ---------------------------------------------------------------------------- masks and positions


@pytest.mark.parametrize(
    ("response", "eos", "expected"),
    [
        ([[0, 0, 2, 42, 3, 5, 1, 0, 0]], 1, [[1, 1, 1, 1, 1, 1, 1, 0, 0]]),  # EOS in the middle, inclusive
        ([[1, 5, 1, 5]], 1, [[1, 0, 0, 0]]),  # EOS first: only it is kept; the second EOS is masked
        ([[5, 6, 7, 1]], 1, [[1, 1, 1, 1]]),  # EOS last
        ([[5, 6, 7, 8]], 1, [[1, 1, 1, 1]]),  # no EOS: all ones
        ([[5, 9, 7, 1, 4]], [1, 9], [[1, 1, 0, 0, 0]]),  # list of EOS ids: the first of either ends
    ],
)
def test_get_response_mask(response: list[list[int]], eos: int | list[int], expected: list[list[int]]) -> None:
    mask = tf.get_response_mask(torch.tensor(response), eos_token=eos, dtype=torch.int64)
    assert mask.tolist() == expected
    assert mask.dtype == torch.int64
    assert tf.get_eos_mask is tf.get_response_mask


def test_get_response_mask_dtype_and_batch() -> None:
    mask = tf.get_response_mask(torch.tensor([[3, 2, 2], [2, 3, 3]]), eos_token=2, dtype=torch.float32)
    assert mask.dtype == torch.float32
    assert mask.tolist() == [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]


def test_compute_position_id_with_mask() -> None:
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]])
    # cumsum - 1 clipped at 0: [-1,-1,0,1,2] → [0,0,0,1,2]; [0,1,2,3,3]
    assert tf.compute_position_id_with_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 3]]


# ---------------------------------------------------------------------------- padding helpers


def test_pad_2d_list_to_length() -> None:
    assert tf.pad_2d_list_to_length([[1, 2, 3], [4]], pad_token_id=0).tolist() == [[1, 2, 3], [4, 0, 0]]
    assert tf.pad_2d_list_to_length([[1], [4, 5]], pad_token_id=-1, max_length=4).tolist() == [
        [1, -1, -1, -1],
        [4, 5, -1, -1],
    ]
    # max_length shorter than the longest row does not truncate
    assert tf.pad_2d_list_to_length([[1, 2, 3]], pad_token_id=0, max_length=2).shape == (1, 3)


def test_pad_sequence_to_length_left_and_right() -> None:
    x = torch.tensor([[7, 8]])
    assert tf.pad_sequence_to_length(x, 4, pad_token_id=0).tolist() == [[7, 8, 0, 0]]
    assert tf.pad_sequence_to_length(x, 4, pad_token_id=0, left_pad=True).tolist() == [[0, 0, 7, 8]]
    assert tf.pad_sequence_to_length(x, 1, pad_token_id=0) is x


@pytest.mark.parametrize(
    ("truncation", "ids"),
    [("left", [3, 4, 5, 6]), ("right", [1, 2, 3, 4]), ("middle", [1, 2, 5, 6])],
)
def test_postprocess_data_truncation(truncation: str, ids: list[int]) -> None:
    input_ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    out_ids, out_mask = tf.postprocess_data(input_ids, torch.ones_like(input_ids), 4, 0, truncation=truncation)
    assert out_ids.tolist() == [ids]
    assert out_mask.tolist() == [[1, 1, 1, 1]]


def test_postprocess_data_pads_left_and_errors() -> None:
    ids, mask = tf.postprocess_data(torch.tensor([[5, 6]]), torch.tensor([[1, 1]]), 4, pad_token_id=9)
    assert ids.tolist() == [[9, 9, 5, 6]] and mask.tolist() == [[0, 0, 1, 1]]
    with pytest.raises(NotImplementedError, match="sequence_length=3"):
        tf.postprocess_data(torch.tensor([[1, 2, 3]]), torch.ones(1, 3), 2, 0, truncation="error")
    with pytest.raises(AssertionError, match="bogus"):
        tf.postprocess_data(torch.tensor([[1]]), torch.ones(1, 1), 2, 0, truncation="bogus")


class _CharTokenizer:
    """One token per character: ord(c) - 96 ('a' → 1)."""

    def __call__(self, text: str, return_tensors: str, add_special_tokens: bool) -> dict[str, torch.Tensor]:
        assert return_tensors == "pt" and add_special_tokens is False
        ids = torch.tensor([[ord(c) - 96 for c in text]])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def test_tokenize_and_postprocess_data() -> None:
    ids, mask = tf.tokenize_and_postprocess_data("abc", _CharTokenizer(), max_length=5, pad_token_id=0)
    assert ids.tolist() == [[0, 0, 1, 2, 3]] and mask.tolist() == [[0, 0, 1, 1, 1]]
    ids, _ = tf.tokenize_and_postprocess_data("abcdef", _CharTokenizer(), 4, 0, left_pad=False, truncation="right")
    assert ids.tolist() == [[1, 2, 3, 4]]


def test_remove_pad_token_strips_left_padding() -> None:
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 1]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert tf.remove_pad_token(ids, mask) == [[5, 6], [7, 8, 9, 1]]
