"""LoRA GRPO through the CLI (``python -m hybridrl.trainer.main_ppo ... model.lora_rank=8``): the adapters train
(the policy moves away from the adapter-free reference), checkpoints hold ``lora_adapter/``, and the merger turns the
last checkpoint into a plain HF folder with only the adapted weights changed.

That it learns (digit reward of steps 1–4 → 11–14 up by > 0.1 over 14 steps) is measured by
``python scripts/bench/bench_learning.py --runs lora_grpo``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "trainer"))
from e2e import failure_report, grpo_args, read_metrics, run_main_ppo  # noqa: E402

# A reward a random tiny model can climb: the share of digit characters in the response.
REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    text = (solution_str or "").replace(" ", "")
    return sum(ch.isdigit() for ch in text) / max(len(text), 1)
"""
STEPS = 3  # the last step's KL loss is taken after 2 updates of the adapters


@pytest.fixture(scope="module")
def arithmetic_data_dir(tmp_path_factory):
    """16 train / 8 test one-digit additions in verl's parquet schema (as tests/trainer/conftest.py)."""
    import subprocess

    out = tmp_path_factory.mktemp("arithmetic")
    script = Path(__file__).resolve().parents[3] / "examples" / "data_preprocess" / "arithmetic.py"
    subprocess.run(
        [sys.executable, str(script), "--local_dir", str(out), "--train_size", "16", "--test_size", "8"]
        + ["--digits", "1", "--operators", "+"],
        check=True,
        capture_output=True,
    )
    return str(out)


def lora_grpo_args(model_dir: str, data_dir: str, tmp_path: Path, steps: int) -> list[str]:
    """GRPO with rank-8 adapters on the attention and the output head, KL loss to the adapter-free reference,
    the climbable digit reward, a checkpoint at the last step (in ``tmp_path / "ckpt"``)."""
    reward_file = tmp_path / "digits_reward.py"
    reward_file.write_text(REWARD)
    return grpo_args(
        model_dir,
        data_dir,
        str(tmp_path / "ckpt"),
        **{
            "actor_rollout_ref.model.lora_rank": 8,
            "actor_rollout_ref.model.lora_alpha": 16,
            "actor_rollout_ref.model.target_modules": "[q_proj,v_proj,lm_head]",
            "actor_rollout_ref.actor.optim.lr": 2e-2,
            "actor_rollout_ref.rollout.n": 8,
            "actor_rollout_ref.actor.use_kl_loss": True,
            "custom_reward_function.path": str(reward_file),
            "trainer.total_training_steps": steps,
            "trainer.total_epochs": 100,
            "trainer.test_freq": -1,
            "trainer.val_before_train": False,
            "trainer.save_freq": steps,
        },
    )


@pytest.mark.slow
def test_lora_grpo_trains_the_adapters_and_merges(tiny_llama_dir, arithmetic_data_dir, tmp_path):
    """On the untied tiny Llama with adapters on the attention and the output head: a random model's final
    norm caps how far adapters on the decoder layers alone can move its near-uniform logits."""
    from transformers import AutoModelForCausalLM

    from hybridrl.model_merger import merge

    ckpt, metrics_file = str(tmp_path / "ckpt"), str(tmp_path / "metrics.jsonl")
    args = lora_grpo_args(tiny_llama_dir, arithmetic_data_dir, tmp_path, STEPS)
    proc = run_main_ppo(args, metrics_file, timeout=800)
    assert proc.returncode == 0, failure_report(proc)
    metrics = read_metrics(metrics_file)
    assert sorted(metrics) == list(range(1, STEPS + 1))
    assert metrics[STEPS]["actor/kl_loss"] > 0  # ref (adapters off) and policy (adapters on) differ
    actor_dir = os.path.join(ckpt, f"global_step_{STEPS}", "actor")
    assert os.path.exists(os.path.join(actor_dir, "lora_adapter", "adapter_config.json"))
    merged = merge(actor_dir, str(tmp_path / "merged"))
    model = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    diffs = {n: (p - base.state_dict()[n]).abs().max().item() for n, p in model.state_dict().items()}
    assert diffs["model.layers.0.self_attn.q_proj.weight"] > 0 and diffs["lm_head.weight"] > 0
    assert diffs["model.embed_tokens.weight"] == 0 and diffs["model.layers.0.mlp.up_proj.weight"] == 0  # no adapters
