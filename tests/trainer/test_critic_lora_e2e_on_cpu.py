"""PPO end to end from the CLI, with a LoRA critic (``critic.model.lora_rank=8``): GAE, KL in the reward, actor
and 2 FSDP2 critic ranks over gloo, 2 steps; verl's PPO metric names and checkpoint layout; then the model merger on
the 2-rank critic checkpoint. (A full-weight critic runs in test_main_ppo_e2e_on_cpu.py's split-placement test.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tests.trainer.e2e import (
    VERL_METRICS,
    assert_checkpoint,
    failure_report,
    grpo_args,
    ppo_overrides,
    read_metrics,
    run_main_ppo,
)

pytestmark = pytest.mark.slow


def _values(model, input_ids: torch.Tensor) -> torch.Tensor:
    """Value-head output ``[B, S]`` of a plain HF / peft token-classification model."""
    with torch.no_grad():
        return model.eval()(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits.squeeze(-1)


def test_ppo_with_lora_critic_and_merged_critic(tiny_model_dir, arithmetic_data_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForTokenClassification

    ckpt, metrics_file = str(tmp_path / "ckpt"), str(tmp_path / "metrics.jsonl")
    overrides = {**ppo_overrides(tiny_model_dir), "critic.model.lora_rank": 8, "critic.optim.lr": 1e-2}
    proc = run_main_ppo(grpo_args(tiny_model_dir, arithmetic_data_dir, ckpt, **overrides), metrics_file)
    assert proc.returncode == 0, failure_report(proc)
    metrics = read_metrics(metrics_file)
    for name in VERL_METRICS + ["critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm",
                                "critic/values/mean", "critic/vf_explained_var", "actor/reward_kl_penalty",
                                "actor/reward_kl_penalty_coeff", "timing_s/values", "timing_s/update_critic",
                                "timing_s/ref"]:
        assert name in metrics[2], name
    for step in (1, 2):
        assert metrics[step]["critic/grad_norm"] > 0
        assert "critic/vf_loss" in metrics[step] and "critic/values/mean" in metrics[step]
    assert_checkpoint(ckpt, 2, roles=("actor", "critic"))
    critic_dir = os.path.join(ckpt, "global_step_2", "critic")
    adapter_dir = os.path.join(critic_dir, "lora_adapter")
    assert os.path.exists(os.path.join(adapter_dir, "adapter_model.safetensors"))

    target = str(tmp_path / "merged_critic")
    cmd = [sys.executable, "-m", "hybridrl.model_merger", "merge", "--backend", "fsdp"]
    merge = subprocess.run(
        [*cmd, "--local_dir", critic_dir, "--target_dir", target], capture_output=True, text=True, timeout=300
    )
    assert merge.returncode == 0, merge.stderr[-3000:]
    merged = AutoModelForTokenClassification.from_pretrained(target, dtype=torch.float32)
    assert merged.config.num_labels == 1
    base = AutoModelForTokenClassification.from_pretrained(tiny_model_dir, num_labels=1, dtype=torch.float32)
    trained = PeftModel.from_pretrained(base, adapter_dir)
    input_ids = torch.randint(5, 500, (2, 12), generator=torch.Generator().manual_seed(0))
    expected = _values(trained, input_ids)
    torch.testing.assert_close(_values(merged, input_ids), expected, rtol=1e-5, atol=1e-5)
    from safetensors.torch import load_file

    adapter = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    assert {"base_model.model.score.weight", "base_model.model.score.bias"} <= set(adapter)  # the trained head
    assert any(name.endswith("lora_B.weight") and bool(t.abs().max() > 0) for name, t in adapter.items())  # trained
