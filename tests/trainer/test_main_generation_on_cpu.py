"""main_generation end to end on the tiny model and a small verl-schema parquet file."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest
from omegaconf import OmegaConf

from hybridrl.utils.config_files import config_dir

PROMPTS = ["What is 1 + 2?", "What is 7 * 8?", "hello"]


@pytest.fixture()
def prompt_parquet(tmp_path):
    frame = pd.DataFrame(
        {
            "data_source": ["arith"] * len(PROMPTS),
            "prompt": [[{"role": "user", "content": text}] for text in PROMPTS],
            "reward_model": [{"style": "rule", "ground_truth": "3"}] * len(PROMPTS),
        }
    )
    path = tmp_path / "prompts.parquet"
    frame.to_parquet(path)
    return path


def _overrides(tiny_model_dir, prompt_parquet, output_path):
    return [
        f"data.path={prompt_parquet}",
        f"data.output_path={output_path}",
        f"model.path={tiny_model_dir}",
        "data.n_samples=2",
        "data.batch_size=2",
        "rollout.name=hf",
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=2",
        "rollout.prompt_length=64",
        "rollout.response_length=6",
        "rollout.dtype=float32",
    ]


def test_run_generation_on_worker_group(tiny_model_dir, prompt_parquet, tmp_path, ray_cluster):
    from hybridrl.trainer.main_generation import run_generation

    output_path = tmp_path / "out" / "gen.parquet"
    config = OmegaConf.merge(
        OmegaConf.load(config_dir() / "generation.yaml"),
        OmegaConf.from_dotlist(_overrides(tiny_model_dir, prompt_parquet, output_path)),
    )
    run_generation(config)
    result = pd.read_parquet(output_path)
    assert list(result["data_source"]) == ["arith"] * 3  # input columns kept, row order kept
    assert all(len(responses) == 2 for responses in result["responses"])  # n_samples per prompt
    assert all(isinstance(text, str) and text for responses in result["responses"] for text in responses)


@pytest.mark.slow
def test_main_generation_cli(tiny_model_dir, prompt_parquet, tmp_path):
    output_path = tmp_path / "gen.parquet"
    cmd = [
        sys.executable,
        "-m",
        "hybridrl.trainer.main_generation",
        *_overrides(tiny_model_dir, prompt_parquet, output_path),
        "rollout.do_sample=False",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = pd.read_parquet(output_path)
    assert len(result) == 3
    greedy = [list(responses) for responses in result["responses"]]
    assert all(responses[0] == responses[1] for responses in greedy)  # greedy: both samples identical
