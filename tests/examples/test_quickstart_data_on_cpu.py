"""examples/quickstart: the task data (verl's schema, 2-digit addition, held-out set), its reward, the summary."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest

from hybridrl.utils.reward_score import default_compute_score

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"
QUESTION = re.compile(r"^What is (\d+) \+ (\d+)\? Answer with just the number\.$")


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"qs_{name}", QUICKSTART / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


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
