"""examples/quickstart: the task data (verl's schema, 2-digit addition, held-out set), its reward, the summary."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from quickstart_testlib import load

from hybridrl.utils.reward_score import default_compute_score

QUESTION = re.compile(r"^What is (\d+) \+ (\d+)\? Answer with just the number\.$")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return load("make_data").make_data(tmp_path_factory.mktemp("qs_data"), train_size=512, test_size=128, seed=0)


def test_rows_follow_verls_schema_and_the_task(data_dir):
    train, test = pd.read_parquet(data_dir / "train.parquet"), pd.read_parquet(data_dir / "test.parquet")
    assert (len(train), len(test)) == (512, 128)
    for frame in (train, test):
        assert list(frame.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
        assert set(frame["data_source"]) == {"arithmetic"}
        for prompt, reward_model in zip(frame["prompt"], frame["reward_model"]):
            assert len(prompt) == 1 and prompt[0]["role"] == "user"
            a, b = map(int, QUESTION.match(prompt[0]["content"]).groups())
            assert 10 <= a <= 99 and 10 <= b <= 99
            assert reward_model == {"style": "rule", "ground_truth": str(a + b)}
    held_out = {p[0]["content"] for p in test["prompt"]}
    assert len(held_out) == 128 and not held_out & {p[0]["content"] for p in train["prompt"]}


def test_operands_cover_the_range(data_dir):
    # a, b uniform on 10..99 (90 values): 512 rows × 2 operands should hit both ends and most values.
    train = pd.read_parquet(data_dir / "train.parquet")
    operands = [int(x) for p in train["prompt"] for x in QUESTION.match(p[0]["content"]).groups()]
    assert min(operands) == 10 and max(operands) == 99 and len(set(operands)) > 80


def test_rerun_reuses_and_new_settings_rewrite(data_dir, capsys):
    make_data = load("make_data")
    before = (data_dir / "test.parquet").stat().st_mtime_ns
    make_data.make_data(data_dir, train_size=512, test_size=128, seed=0)
    assert "reusing" in capsys.readouterr().out
    assert (data_dir / "test.parquet").stat().st_mtime_ns == before
    other = make_data.make_data(data_dir.parent / "other", train_size=64, test_size=8, seed=1)
    assert len(pd.read_parquet(other / "train.parquet")) == 64


@pytest.mark.parametrize(
    ("completion", "score"),
    [
        ("87", 1.0),  # the bare answer
        ("30 + 57 = 87", 1.0),  # the last integer counts, not the first
        ("The answer is 87.", 1.0),
        ("87\n\nI hope this helps with 2 things", 0.0),  # a trailing integer (2) is the answer
        ("30 + 57 = 155", 0.0),
        ("eighty-seven", 0.0),  # no integer at all
        ("", 0.0),
    ],
)
def test_reward_on_hand_made_completions(completion, score):
    assert default_compute_score("arithmetic", completion, "87") == score


def test_summary_reads_the_file_logger_jsonl(tmp_path):
    summarize = load("summarize")
    key, reward, step_t = summarize.VAL_KEY, summarize.REWARD_KEY, summarize.STEP_TIME_KEY
    rows = [
        {"step": 0, "data": {key: 0.125}},
        {"step": 1, "data": {reward: 0.2, step_t: 30.0}},
        {"step": 2, "data": {reward: 0.5, step_t: 40.0, "timing_s/testing": 10.0, key: 0.75}},
        {"step": 3, "data": {reward: 0.8, step_t: 30.0, "timing_s/testing": 5.0, key: 0.8}},
    ]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    curves = summarize.read_curves(path)
    assert curves.first_step_reaching(0.727) == 2
    # training time excludes validation: step 1 = 30 s, step 2 = 40 - 10 = 30 s → 60 s = 1.0 min
    assert curves.train_minutes_until(2) == pytest.approx(1.0)
    lines = summarize.summary_lines(curves, 0.727, total_wall_s=300)
    assert "before 12.5% (step 0) -> after 80.0% (step 3)" in lines[0]
    assert "reached at step 2 after 1.00 min" in lines[2] and "5.00 min" in lines[3]
    summarize.plot(curves, tmp_path / "curve.png", 0.727)
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_names_the_missing_metric(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"step": 1, "data": {"critic/score/mean": 0.1}}) + "\n")
    with pytest.raises(ValueError, match="val_before_train"):
        load("summarize").read_curves(path)


def test_wilson_interval_hand_computed():
    summarize = load("summarize")
    # k=104, n=128: p = 0.8125, z² = 3.841459, z²/n = 0.0300114, scale = 1.0300114
    # center = (0.8125 + 3.841459/256) / 1.0300114 = 0.8275057 / 1.0300114 = 0.8033952
    # half = 1.959964 / 1.0300114 · sqrt(0.8125·0.1875/128 + 3.841459/65536) = 1.902855 · 0.0353385 = 0.0672443
    low, high = summarize.wilson_interval(104, 128)
    assert low == pytest.approx(0.8033952 - 0.0672443, abs=1e-6)  # 0.7361509
    assert high == pytest.approx(0.8033952 + 0.0672443, abs=1e-6)  # 0.8706395
    # k=0, n=10: center = (3.841459/20) / 1.3841459 = 0.1387663 = half → [0, 0.2775327]
    assert summarize.wilson_interval(0, 10) == pytest.approx((0.0, 0.2775327), abs=1e-6)
    # k=n=10 mirrors it: [1 − 0.2775327, 1]
    assert summarize.wilson_interval(10, 10) == pytest.approx((0.7224673, 1.0), abs=1e-6)
    with pytest.raises(ValueError, match="correct <= total"):
        summarize.wilson_interval(5, 4)


def test_summary_reports_the_final_accuracy_interval_in_text_and_json(tmp_path, capsys):
    summarize = load("summarize")
    key = summarize.VAL_KEY
    rows = [{"step": 0, "data": {key: 0.25}}, {"step": 5, "data": {key: 0.8125, "timing_s/step": 60.0}}]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summarize.main([str(path), "--num_val", "128", "--json", str(tmp_path / "s.json")])
    printed = capsys.readouterr().out
    assert "final greedy accuracy 104/128 = 81.2%, 95% interval [73.6%, 87.1%] (Wilson score)" in printed
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["correct"] == 104 and summary["num_val"] == 128
    assert summary["ci95_low"] == pytest.approx(0.7361509, abs=1e-6)
    assert summary["ci95_high"] == pytest.approx(0.8706395, abs=1e-6)
    assert summary["accuracy_before"] == 0.25 and summary["accuracy_after"] == 0.8125
    assert summary["target_step"] == 5 and summary["target_train_minutes"] == pytest.approx(1.0)
    # 0.8125 of 100 problems is no whole count: the wrong --num_val is named
    with pytest.raises(ValueError, match="--num_val"):
        summarize.main([str(path), "--num_val", "100"])
