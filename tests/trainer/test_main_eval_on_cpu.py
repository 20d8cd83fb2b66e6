"""main_eval scores a generated parquet per data source (verl's test_score/{data_source})."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest
from omegaconf import OmegaConf

from hybridrl.trainer.main_eval import evaluate, score_rows
from hybridrl.utils.config_files import config_dir


@pytest.fixture()
def generated_parquet(tmp_path):
    frame = pd.DataFrame({
        "data_source": ["arithmetic", "arithmetic", "openai/gsm8k"],
        "prompt": [[{"role": "user", "content": "q"}]] * 3,
        "responses": [["The answer is 7", "8"], ["12", "12"], ["#### 5", "#### 4"]],
        "reward_model": [{"ground_truth": "7"}, {"ground_truth": "12"}, {"ground_truth": "5"}],
    })
    path = tmp_path / "gen.parquet"
    frame.to_parquet(path)
    return path


def test_score_rows_means_over_responses():
    from hybridrl.utils.reward_score import default_compute_score

    rows = [("arithmetic", ["7", "8"], "7"), ("arithmetic", ["12", "12"], "12")]
    assert score_rows(default_compute_score, rows) == [("arithmetic", 0.5), ("arithmetic", 1.0)]


def test_evaluate_per_data_source(generated_parquet, ray_cluster):
    config = OmegaConf.merge(OmegaConf.load(config_dir() / "evaluation.yaml"),
                             OmegaConf.from_dotlist([f"data.path={generated_parquet}"]))
    metrics = evaluate(config)
    # arithmetic: row means 0.5 ("7" right, "8" wrong) and 1.0 → 0.75; gsm8k: "#### 5" right, "#### 4" wrong → 0.5
    assert metrics == {"test_score/arithmetic": 0.75, "test_score/openai/gsm8k": 0.5}


def test_missing_column_names_the_key(tmp_path, ray_cluster):
    path = tmp_path / "bad.parquet"
    pd.DataFrame({"data_source": ["arithmetic"], "reward_model": [{"ground_truth": "1"}]}).to_parquet(path)
    config = OmegaConf.merge(OmegaConf.load(config_dir() / "evaluation.yaml"),
                             OmegaConf.from_dotlist([f"data.path={path}"]))
    with pytest.raises(KeyError, match="responses"):
        evaluate(config)


@pytest.mark.slow
def test_main_eval_cli(generated_parquet, tmp_path):
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-m", "hybridrl.trainer.main_eval", f"data.path={generated_parquet}"],
                          capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "'test_score/arithmetic': 0.75" in proc.stdout
