"""Precision by measurement: the decision fed measured figures, the shapes read from a model config, and one real
measurement on the machine at hand (with what the CPU flags guarantee about it)."""

from __future__ import annotations

import json

import pytest

from hybridrl.utils.cpu_features import has_native_bf16
from hybridrl.utils.cpu_precision import (
    BF16_MIN_SPEEDUP,
    MatmulShape,
    PrecisionFigures,
    choose_precision,
    main,
    measure_precision,
    model_matmul_shapes,
)

SMOLLM2_135M = {"hidden_size": 576, "intermediate_size": 1536, "vocab_size": 49152}


@pytest.mark.parametrize(
    ("fp32", "bf16", "expected"),
    [
        (50.0, 120.0, "bf16"),  # AMX-like: bf16 2.4x faster
        (50.0, 50.0 * BF16_MIN_SPEEDUP, "bf16"),  # exactly the margin
        (50.0, 55.0, "fp32"),  # 1.1x: not worth bf16's numerics
        (78.0, 1.3, "fp32"),  # emulated bf16 (AVX2-only EPYC, measured once: 1.3 vs 78 GFLOP/s)
    ],
)
def test_auto_takes_bf16_only_when_measured_clearly_faster(fp32, bf16, expected):
    assert choose_precision("auto", PrecisionFigures(fp32, bf16)) == expected


@pytest.mark.parametrize("requested", ["bf16", "bfloat16"])
def test_an_explicit_bf16_wins_over_a_slow_measurement(requested):
    assert choose_precision(requested, PrecisionFigures(78.0, 1.3)) == "bf16"


@pytest.mark.parametrize("requested", ["fp32", "float32"])
def test_an_explicit_fp32_wins_over_a_fast_measurement(requested):
    assert choose_precision(requested, PrecisionFigures(50.0, 120.0)) == "fp32"


def test_auto_without_figures_is_fp32_and_bad_names_are_refused():
    assert choose_precision("auto", None) == "fp32"
    with pytest.raises(ValueError, match="'half'"):
        choose_precision("half", None)


def test_the_shapes_are_a_layer_and_the_head_smallest_first():
    shapes = model_matmul_shapes(SMOLLM2_135M, tokens=128)
    assert shapes == [
        MatmulShape(128, 576, 576),
        MatmulShape(128, 576, 1536),
        MatmulShape(128, 1536, 576),
        MatmulShape(128, 576, 4096),  # the LM head, capped at HEAD_COLUMNS of the 49,152
    ]
    assert shapes[0].flops == 2 * 128 * 576 * 576
    # a config without intermediate_size: the usual 4 x hidden; a vocabulary under the cap: all of it
    assert model_matmul_shapes({"hidden_size": 8, "vocab_size": 10}, tokens=2) == [
        MatmulShape(2, 8, 8),
        MatmulShape(2, 8, 10),
        MatmulShape(2, 8, 32),
        MatmulShape(2, 32, 8),
    ]


def test_a_real_measurement_on_this_machine():
    figures = measure_precision(model_matmul_shapes(SMOLLM2_135M, tokens=32))
    assert figures.fp32_gflops > 0 and figures.bf16_gflops > 0
    if has_native_bf16() is False:  # no bf16 units: torch emulates bf16, an order of magnitude slower
        assert figures.bf16_speedup < 1 / 2
        assert choose_precision("auto", figures) == "fp32"


def test_the_command_line_reads_the_model_config_and_prints_both_figures(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64, "intermediate_size": 128, "vocab_size": 96}))
    choices = main(["--model", str(tmp_path), "--decode_rows", "8", "--rollout", "float32"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("[precision] train (128 tokens/matmul): fp32 ")
    assert choices["rollout"] == "float32"  # explicit: not measured, no line
    assert lines[-1] == f"train={choices['train']} rollout=float32"
