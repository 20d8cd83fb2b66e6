"""Pipeline parallelism (PP=2, 2 gloo ranks) of the Megatron policy worker against PP=1 and HF.

Through megatron-core's 1F1B schedule over gloo p2p (CPU patch P5): the tiny tied Qwen2 (2 layers: one per stage;
the embedding on stage 0, the final norm and the tied output layer on stage 1). Sequence on each run: log-probs
(and entropies, and Σπ² with ``actor.calculate_sum_pi_squared``) of a batch → one PPO update (1 mini-batch of 4, 2 micro-batches, Adam, lr 1e-3, clip 1.0, weight
decay 0) → log-probs of a probe batch → reference log-probs → the hf rollout synced from the actor (weights gathered
over PP) and greedy decoding (checkpoints at PP=2: test_megatron_pipeline_checkpoint_on_cpu.py). Tolerances (fp32): 1e-5 absolute on log-probs, 1e-5 relative on the update's metrics.
"""

from __future__ import annotations

import torch
from megatron_testlib import greedy_prompts, hf_response_logits, policy_batch, policy_config, run_rank_groups

TOLERANCE = 1e-5
_METRICS = ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/grad_norm")


def _pipeline_run(rank: int, model_dir: str, out_dir: str, pp_size: int, *overrides: str) -> dict:
    from hybridrl.workers.megatron.worker import MegatronActorRolloutRefWorker

    config = policy_config(model_dir, 1, "actor_rollout_ref.rollout.response_length=4",
                           "actor_rollout_ref.actor.calculate_sum_pi_squared=True", *overrides,
                           f"actor_rollout_ref.actor.megatron.pipeline_model_parallel_size={pp_size}",
                           f"actor_rollout_ref.ref.megatron.pipeline_model_parallel_size={pp_size}")
    worker = MegatronActorRolloutRefWorker(config, role="actor_rollout_ref")
    worker.init_model()
    data = policy_batch(seed=1)
    scored = worker.compute_log_prob(data).batch
    before = scored["old_log_probs"]
    data.batch["old_log_probs"] = before + 0.01 * data.batch["response_mask"]  # off-policy: clipping is exercised
    metrics = worker.update_actor(data).meta_info["metrics"]
    after = worker.compute_log_prob(policy_batch(seed=2)).batch["old_log_probs"]
    ref = worker.compute_ref_log_prob(data).batch["ref_log_prob"]
    generated = worker.generate_sequences(greedy_prompts(seed=2))
    sync = generated.meta_info["metrics"]
    gpt = worker.actor_model.gpt  # this stage's part of the model
    stage = {"layers": len(gpt.decoder.layers), "embedding": int(hasattr(gpt, "embedding")),
             "output_layer": int(hasattr(gpt, "output_layer"))}
    return {**stage, "before": before, "entropys": scored["entropys"], "sum_pi_squared": scored["sum_pi_squared"],
            "after": after, "ref": ref,
            "responses": generated.batch["responses"], "synced": sync["rollout/weight_sync_tensors"],
            "verified": sync["rollout/weight_sync_verified_tensors"],
            **{key: float(metrics[key][0]) for key in _METRICS}}


def _max_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return (a - b)[mask].abs().max().item()


def test_pp2_equals_pp1_and_hf(tmp_path, tiny_gqa_qwen2_dir):
    """Tied Qwen2 (the last stage's output layer is a copy of the embedding, kept equal through its gradients),
    padded rows."""
    _compare_pp2_with_pp1_and_hf(tmp_path, tiny_gqa_qwen2_dir)


def test_pp2_equals_pp1_and_hf_on_packed_rows(tmp_path, tiny_gqa_llama_dir):
    """Untied Llama (``lm_head`` on the last stage), packed rows (``use_remove_padding=True``): each micro-batch's
    packed length differs, so the schedule sends shapes before tensors (``variable_seq_lengths``)."""
    _compare_pp2_with_pp1_and_hf(tmp_path, tiny_gqa_llama_dir, "actor_rollout_ref.model.use_remove_padding=True")


def _compare_pp2_with_pp1_and_hf(tmp_path, model_dir: str, *overrides: str) -> None:
    [pp1], pp2 = run_rank_groups((_pipeline_run, 1, tmp_path / "pp1", model_dir, str(tmp_path / "pp1"), 1, *overrides),
                                 (_pipeline_run, 2, tmp_path / "pp2", model_dir, str(tmp_path / "pp2"), 2, *overrides))
    mask = policy_batch(seed=1).batch["response_mask"].bool()
    probe_mask = policy_batch(seed=2).batch["response_mask"].bool()
    hf_logits = hf_response_logits(model_dir, policy_batch(seed=1))  # [B, R, V]
    hf = torch.log_softmax(hf_logits, dim=-1).gather(-1, policy_batch(seed=1).batch["responses"].unsqueeze(-1))[..., 0]
    hf_sum_pi_squared = torch.softmax(hf_logits, dim=-1).pow(2).sum(-1)  # Σ_v π(v)² at rollout.temperature = 1
    # the model is split: one decoder layer per stage, the embedding on stage 0, the output layer on stage 1
    assert [(r["layers"], r["embedding"], r["output_layer"]) for r in pp2] == [(1, 1, 0), (1, 0, 1)]
    assert (pp1["layers"], pp1["embedding"], pp1["output_layer"]) == (2, 1, 1)
    for stage, run in enumerate(pp2):  # every stage returns the last stage's results
        diffs = {"before vs PP=1": _max_diff(run["before"], pp1["before"], mask),
                 "before vs HF": _max_diff(run["before"], hf, mask),
                 "entropy vs PP=1": _max_diff(run["entropys"], pp1["entropys"], mask),
                 "Σπ² vs PP=1": _max_diff(run["sum_pi_squared"], pp1["sum_pi_squared"], mask),
                 "Σπ² vs HF": _max_diff(run["sum_pi_squared"], hf_sum_pi_squared, mask),
                 "after update vs PP=1": _max_diff(run["after"], pp1["after"], probe_mask),
                 "reference vs initial": _max_diff(run["ref"], run["before"], mask)}
        print(f"PP=2 stage {stage}: " + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
        assert all(value < TOLERANCE for value in diffs.values()), diffs
        for key in _METRICS:
            assert abs(run[key] - pp1[key]) <= TOLERANCE * max(1.0, abs(pp1[key])), (key, run[key], pp1[key])
        # the rollout got every HF tensor (gathered over PP) and decodes as the PP=1 actor's rollout does
        assert run["synced"] == pp1["synced"] and run["verified"] > 0
        assert torch.equal(run["responses"], pp1["responses"])
    assert pp1["actor/grad_norm"] > 0 and pp1["verified"] > 0
