"""Megatron checkpoints at PP=2 (2 gloo ranks, the tied tiny Qwen2: one decoder layer per stage, the embedding on
stage 0, the final norm and the output layer — megatron-core's copy of the tied embedding — on stage 1).

One run: PPO update 1 → save (model, optimizer, extra, hf_model) → update 2 → log-probs L2 of a probe batch. Then a
fresh PP=2 model loads the checkpoint and makes update 2 (bit-identical L2), and the folder is merged to HF
(``model_merger merge --backend megatron``) whose logits equal the Megatron model's logits at the save.
"""

from __future__ import annotations

import os

import torch
from megatron_testlib import off_policy_update, policy_batch, policy_config, run_ranks

# fp32 on CPU, same kernels in the same order: resume is bit-exact (measured max diff 0.0)
RESUME_TOLERANCE = 0.0
# merged HF folder (eager attention) vs megatron-core's PP=2 logits (measured max diff 0.0 at TP=1, fp32 CPU)
MERGED_LOGITS_TOLERANCE = 1e-5
_PP2 = ("actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        "actor_rollout_ref.actor.optim.lr_warmup_steps=4", "actor_rollout_ref.actor.optim.lr_warmup_init=1e-4")


def _worker(model_dir: str):
    from hybridrl.workers.megatron.worker import MegatronActorRolloutRefWorker

    worker = MegatronActorRolloutRefWorker(policy_config(model_dir, 1, *_PP2), role="actor")
    worker.init_model()
    return worker


def _probe_input() -> tuple[torch.Tensor, torch.Tensor]:
    input_ids = torch.randint(5, 500, (2, 9), generator=torch.Generator().manual_seed(7))
    return input_ids, torch.arange(9).expand(2, 9)


@torch.no_grad()
def _pipeline_logits(worker) -> torch.Tensor:
    """Logits ``[2, 9, V]`` of a fixed unpadded batch through both stages (stage 0's hidden state ``[S, B, H]``
    sent to stage 1 by hand); an empty tensor on stage 0."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    causal_lm, gpt = worker.actor_model.causal_lm, worker.actor_model.gpt
    input_ids, positions = _probe_input()
    if parallel_state.is_pipeline_first_stage():
        causal_lm(input_ids, torch.ones_like(input_ids), positions)
        hidden, causal_lm.stage_output = causal_lm.stage_output, None
        dist.send(hidden.contiguous(), dst=1)
        return torch.empty(0)
    hidden = torch.empty(9, 2, worker.actor_model.hf_config.hidden_size)
    dist.recv(hidden, src=0)
    gpt.set_input_tensor(hidden)
    logits = causal_lm(input_ids, torch.ones_like(input_ids), positions).logits
    gpt.set_input_tensor(None)
    return logits


def _train_save_train(rank: int, model_dir: str, ckpt: str) -> dict:
    worker = _worker(model_dir)
    off_policy_update(worker, seed=1)
    worker.save_checkpoint(ckpt, global_step=1)
    logits = _pipeline_logits(worker)
    off_policy_update(worker, seed=3)
    return {"logits": logits, "l2": worker.compute_log_prob(policy_batch(seed=2)).batch["old_log_probs"]}


def _load_and_train(rank: int, model_dir: str, ckpt: str) -> dict:
    """A model-only load + update 2 (the control: fresh Adam moments, LR schedule at step 0), then the full resume
    + update 2."""
    from hybridrl.workers.megatron.checkpoint import load_megatron_checkpoint

    worker = _worker(model_dir)
    probe = policy_batch(seed=2)
    load_megatron_checkpoint(ckpt, worker.actor_model, worker.actor_optimizer.optimizer, worker.actor_lr_scheduler,
                             load_contents=["model"])
    off_policy_update(worker, seed=3)
    model_only = worker.compute_log_prob(probe).batch["old_log_probs"]
    worker.load_checkpoint(ckpt)
    off_policy_update(worker, seed=3)
    return {"l2": worker.compute_log_prob(probe).batch["old_log_probs"], "model_only": model_only}


def _hf_logits(hf_dir: str) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        return model(input_ids=_probe_input()[0]).logits


def test_pp2_resume_is_exact_and_merged_folder_reproduces_megatron_logits(tmp_path, tiny_gqa_qwen2_dir):
    from hybridrl import model_merger

    ckpt = tmp_path / "ckpt" / "global_step_1" / "actor"
    saved = run_ranks(_train_save_train, 2, tmp_path / "save", tiny_gqa_qwen2_dir, str(ckpt))
    assert sorted(os.listdir(ckpt / "model")) == ["mp_rank_00_000", "mp_rank_00_001"]
    assert sorted(os.listdir(ckpt / "optim")) == [f"distrib_optim_pp{p}_tp0_cp0_dp0.safetensors" for p in (0, 1)]

    resumed = run_ranks(_load_and_train, 2, tmp_path / "load", tiny_gqa_qwen2_dir, str(ckpt))
    mask = policy_batch(seed=2).batch["response_mask"].bool()
    for rank, (before, after) in enumerate(zip(saved, resumed)):
        diff = (after["l2"] - before["l2"])[mask].abs().max().item()
        control = (after["model_only"] - before["l2"])[mask].abs().max().item()
        print(f"PP=2 rank {rank}: log-probs after update 2, resumed vs uninterrupted: max diff {diff:.1e} "
              f"(model-only load: {control:.1e})")
        assert diff <= RESUME_TOLERANCE
        assert control > 1e-4  # the optimizer and LR-schedule state matter: without them update 2 differs

    target = tmp_path / "hf"
    model_merger.main(["merge", "--backend", "megatron", "--local_dir", str(ckpt), "--target_dir", str(target)])
    model_merger.main(["test", "--backend", "megatron", "--local_dir", str(ckpt),
                       "--test_hf_dir", str(ckpt / "huggingface")])  # merged == the hf_model export, tensor by tensor
    megatron_logits = saved[1]["logits"]  # the last stage's
    assert megatron_logits.shape[:2] == (2, 9) and saved[0]["logits"].numel() == 0
    diff = (_hf_logits(str(target)) - megatron_logits).abs().max().item()
    print(f"merged HF vs Megatron PP=2 logits: max diff {diff:.1e}")
    assert diff < MERGED_LOGITS_TOLERANCE
