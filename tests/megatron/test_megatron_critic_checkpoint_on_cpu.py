"""Megatron critic checkpoints (:mod:`hybridrl.workers.megatron.checkpoint`, verl's per-rank layout), TP=2 on 2 gloo
ranks, the tied tiny Qwen2.

A critic updates once and saves (model, optimizer, extra, hf_model); a fresh critic in the same processes loads the
folder. Both then agree bit for bit (fp32, same kernels in the same order) on the values of a probe batch, and
again after one more update of each: the Adam moments and the LR scheduler's position (warmup from 1e-4 over 4
steps) were restored, not only the weights: a weights-only load (the control) then the same update differs. The ``huggingface/`` copy is a token-classification model whose values
equal the saved critic's (HF eager attention; tolerance 1e-5).
"""

from __future__ import annotations

import torch
from megatron_testlib import critic_config, critic_update_batch, policy_batch, run_ranks

_OVERRIDES = ("critic.checkpoint.save_contents=[model,optimizer,extra,hf_model]", "critic.optim.lr_warmup_steps=4",
              "critic.optim.lr_warmup_init=1e-4")
HF_COPY_TOLERANCE = 1e-5


def _critic(model_dir: str):
    from hybridrl.workers.megatron.critic_worker import MegatronCriticWorker

    worker = MegatronCriticWorker(critic_config(model_dir, 2, "megatron", *_OVERRIDES))
    worker.init_model()
    return worker


def _values(worker, seed: int) -> torch.Tensor:
    return worker.compute_values(policy_batch(seed=seed)).batch["values"]


def _save_load_update(rank: int, model_dir: str, ckpt: str) -> dict:
    from hybridrl.workers.megatron.checkpoint import load_megatron_checkpoint

    trained = _critic(model_dir)
    trained.update_critic(critic_update_batch(policy_batch(seed=1), _values(trained, 1)))
    trained.save_checkpoint(ckpt, global_step=1)
    resumed = _critic(model_dir)
    fresh = _values(resumed, 2)
    resumed.load_checkpoint(ckpt)
    control = _critic(model_dir)  # weights only: fresh Adam moments, LR schedule at step 0
    load_megatron_checkpoint(ckpt, control.critic_model, control.critic_optimizer.optimizer,
                             control.critic_lr_scheduler, load_contents=["model"])
    old_values = _values(trained, 3)  # the old values of the second update, the same for all
    result = {"fresh": fresh}
    for name, worker in (("trained", trained), ("resumed", resumed), ("control", control)):
        result[f"{name}_saved"] = _values(worker, 2)
        metrics = worker.update_critic(critic_update_batch(policy_batch(seed=3), old_values)).meta_info["metrics"]
        result[f"{name}_lr"] = float(metrics["critic/lr"])
        result[f"{name}_after"] = _values(worker, 2)
    return result


def _hf_copy_values(hf_dir: str) -> torch.Tensor:
    """Values ``[B, R]`` of the checkpoint's ``huggingface/`` copy loaded as the FSDP critic loads a model."""
    from hybridrl.workers.engine.model_loader import load_hf_model

    model, _ = load_hf_model(hf_dir, kind="token_classification", attn_implementation="eager")
    batch = policy_batch(seed=2).batch
    with torch.no_grad():
        logits = model.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                              position_ids=batch["position_ids"]).logits
    return logits[:, -batch["responses"].shape[1] - 1 : -1, 0] * batch["response_mask"]


def test_megatron_critic_resumes_exactly(tmp_path, tiny_gqa_qwen2_dir):
    ckpt = tmp_path / "global_step_1" / "critic"
    ranks = run_ranks(_save_load_update, 2, tmp_path / "out", tiny_gqa_qwen2_dir, str(ckpt))
    for result in ranks:
        moved = (result["trained_saved"] - result["fresh"]).abs().max().item()
        print(f"critic checkpoint: the first update moved the values by {moved:.2e}")
        assert moved > 1e-5  # the load changed the weights
        torch.testing.assert_close(result["resumed_saved"], result["trained_saved"], rtol=0, atol=0)
        # warmup 1e-4 → 1e-3 over 4 steps: the second optimizer step runs at 1e-4 + (1e-3 − 1e-4) · 1/4
        assert result["trained_lr"] == result["resumed_lr"] and abs(result["trained_lr"] - 3.25e-4) < 1e-12
        torch.testing.assert_close(result["resumed_after"], result["trained_after"], rtol=0, atol=0)
        control = (result["control_after"] - result["trained_after"]).abs().max().item()
        print(f"critic checkpoint: a weights-only load then the same update differs by {control:.2e}")
        assert torch.equal(result["control_saved"], result["trained_saved"]) and control > 1e-5
    hf_diff = (_hf_copy_values(str(ckpt / "huggingface")) - ranks[0]["trained_saved"]).abs().max().item()
    print(f"critic checkpoint: HF copy values vs the saved critic {hf_diff:.2e}")
    assert hf_diff < HF_COPY_TOLERANCE
