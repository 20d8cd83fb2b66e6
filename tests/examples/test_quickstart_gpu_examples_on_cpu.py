"""examples/{grpo,ppo}_trainer/run_qwen2_5-0.5b.sh and the quickstart's run script: every override they pass is
a valid key of our config tree (checked by composing it with ``main_ppo --cfg job``, which needs no GPU), and
the GPU examples keep verl's quickstart values (GSM8K, vLLM, FSDP2, 8 GPUs per node)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = {
    "grpo": ROOT / "examples" / "grpo_trainer" / "run_qwen2_5-0.5b.sh",
    "ppo": ROOT / "examples" / "ppo_trainer" / "run_qwen2_5-0.5b.sh",
    "quickstart": ROOT / "examples" / "quickstart" / "run_quickstart.sh",
    "tool_agent": ROOT / "examples" / "sglang_multiturn" / "run_qwen2.5-0.5b_gsm8k_tool_agent.sh",
}
EXPECTED = {
    "grpo": {"algorithm.adv_estimator": "grpo", "actor_rollout_ref.actor.use_kl_loss": "True",
             "actor_rollout_ref.rollout.n": "5", "data.train_batch_size": "1024"},
    "ppo": {"algorithm.adv_estimator": "gae", "critic.optim.lr": "1e-5", "data.train_batch_size": "256",
            "actor_rollout_ref.actor.ppo_mini_batch_size": "64"},
}


def main_ppo_overrides(script: Path) -> list[str]:
    """The ``key=value`` arguments of the script's ``main_ppo`` command, with shell variables filled in."""
    text = re.sub(r"\\\n", " ", script.read_text())
    command = next(line for line in text.splitlines()
                   if "hybridrl.trainer.main_ppo" in line and not line.lstrip().startswith("#"))
    command = command.split("|")[0]
    values = {"DATA": "/data/gsm8k", "MODEL": "/models/Qwen2.5-0.5B-Instruct", "HERE": str(script.parent)}
    command = re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), "1"), command)
    words = shlex.split(command)
    return [w for w in words[words.index("hybridrl.trainer.main_ppo") + 1 :] if "=" in w]


def composed_config(overrides: list[str]) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "hybridrl.trainer.main_ppo", *overrides, "--cfg", "job"],
                          capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, f"main_ppo rejected the overrides:\n{proc.stderr[-3000:]}"
    return yaml.safe_load(proc.stdout)


@pytest.mark.parametrize("name", ["grpo", "ppo"])
def test_gpu_example_keeps_verls_quickstart_shape(name):
    args = dict(a.split("=", 1) for a in main_ppo_overrides(SCRIPTS[name]))
    assert args["trainer.n_gpus_per_node"] == "8" and args["actor_rollout_ref.rollout.name"] == "vllm"
    assert args["actor_rollout_ref.actor.strategy"] == "fsdp2"
    assert args["data.train_files"] == "/data/gsm8k/train.parquet"
    assert args["actor_rollout_ref.model.path"] == "/models/Qwen2.5-0.5B-Instruct"
    assert args["actor_rollout_ref.actor.optim.lr"] == "1e-6"
    for key, value in EXPECTED[name].items():
        assert args[key] == value, key
    assert os.access(SCRIPTS[name], os.X_OK)


@pytest.mark.parametrize("name", ["grpo", "ppo", "quickstart", "tool_agent"])
def test_every_override_is_a_config_key(name):
    overrides = main_ppo_overrides(SCRIPTS[name])
    config = composed_config(overrides)
    for override in overrides:
        key, value = override.lstrip("+").split("=", 1)
        node = config
        for part in key.split("."):
            node = node[part]
        if not value.startswith("["):
            assert _normal(node) == _normal(value), f"{key}: composed {node!r}, passed {value!r}"


def _normal(value: object) -> str:
    """'1e-6' and 1e-06, 'True' and True compare equal."""
    text = str(value).strip("'\"")
    try:
        return repr(float(text))
    except ValueError:
        return text.lower()
