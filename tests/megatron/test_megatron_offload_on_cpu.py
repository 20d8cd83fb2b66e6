"""Megatron offload (``megatron.param_offload`` / ``grad_offload`` / ``optimizer_offload``) on 2 gloo ranks.

On CPU the CPU is the device: offloading copies each storage into a separate host tensor and resizes the original
to 0 bytes, so these tests see the mechanism itself (the GPU memory it saves is not measured here):

- the engine: after offload every DDP param / grad buffer, optimizer state and fp32 main param holds 0 bytes; after
  loading the params and optimizer are bit-identical (fp32 and bf16 params, with and without the distributed
  optimizer, DP=2);
- the policy worker (TP=2, actor + reference + hf rollout): all offloads on gives the same log-probs, reference
  log-probs, update metrics and greedy responses, bit for bit, as all off, over 2 updates; between calls the
  actor's and the reference's storages hold 0 bytes; a checkpoint saved and loaded back with offload on scores
  as before;
- the critic worker (DP=2) likewise for values and update metrics over 2 updates, and the reward model worker
  (``param_offload``) for its scores, called twice.
"""

from __future__ import annotations

import torch
from megatron_testlib import critic_config, critic_update_batch, greedy_prompts, policy_batch, policy_config, run_ranks

_ACTOR_METRICS = ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/grad_norm", "actor/lr")
_CRITIC_METRICS = ("critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm", "critic/lr")
_VARIANTS = (("float32", True), ("bfloat16", True), ("float32", False), ("bfloat16", False))


def _stored_bytes(tensors: list[torch.Tensor]) -> int:
    return sum(tensor.untyped_storage().nbytes() for tensor in tensors)


def _engine_round_trip(rank: int, model_dir: str) -> dict:
    """For each (param dtype, distributed optimizer): build at DP=2, one optimizer step on seeded random grads, then
    offload → bytes left, load → equality with the snapshot taken before."""
    from omegaconf import OmegaConf
    from transformers import AutoConfig

    from hybridrl.workers.megatron import offload
    from hybridrl.workers.megatron.engine import build_megatron_model, build_megatron_optimizer
    from hybridrl.workers.megatron.parallel import init_megatron_parallel

    section = policy_config(model_dir, 1).actor.megatron
    init_megatron_parallel(section, "cpu")
    hf_config = AutoConfig.from_pretrained(model_dir)
    optim = OmegaConf.create({"optimizer": "adam", "lr": 1e-3, "min_lr": 0.0, "weight_decay": 0.0, "clip_grad": 1.0})
    result = {}
    for dtype_name, distributed in _VARIANTS:
        megatron_config = OmegaConf.merge(section, {"use_distributed_optimizer": distributed})
        model = build_megatron_model(model_dir, hf_config, megatron_config, getattr(torch, dtype_name), "cpu",
                                     trainable=True)
        optimizer = build_megatron_optimizer(model, optim, megatron_config)
        generator = torch.Generator().manual_seed(rank)
        for buffer in model.ddp.buffers:
            buffer.grad_data.copy_(torch.randn(buffer.grad_data.shape, generator=generator))
        optimizer.step()  # creates the Adam moments (and moves the params)
        params, grads = offload.model_param_tensors(model), offload.model_grad_tensors(model)
        states = offload.optimizer_tensors(optimizer)
        before = [tensor.detach().clone() for tensor in params + states]
        named = {name: param.detach().clone() for name, param in model.gpt.named_parameters()}
        handle = offload.MegatronOffload(model, optimizer, offload.OffloadFlags(True, True, True))
        tag = f"{dtype_name}/{'dist' if distributed else 'plain'}"
        result[f"{tag}/bytes_before"] = float(_stored_bytes(params + grads + states))
        result[f"{tag}/freed"] = float(handle.offload())
        result[f"{tag}/bytes_offloaded"] = float(_stored_bytes(params + grads + states))
        result[f"{tag}/states"] = float(len(states))
        handle.load(with_optimizer=True)
        result[f"{tag}/identical"] = float(all(torch.equal(a, b) for a, b in zip(before, params + states)))
        result[f"{tag}/params_identical"] = float(all(torch.equal(param, named[name])
                                                      for name, param in model.gpt.named_parameters()))
        result[f"{tag}/grads_zero"] = float(all(bool((grad == 0).all()) for grad in grads))
        result[f"{tag}/bytes_loaded"] = float(_stored_bytes(params + grads + states))
    return result


def test_engine_offload_frees_storages_and_loads_them_back_bit_identical(tmp_path, tiny_gqa_qwen2_dir):
    for result in run_ranks(_engine_round_trip, 2, tmp_path / "engine", tiny_gqa_qwen2_dir):
        for dtype_name, distributed in _VARIANTS:
            tag = f"{dtype_name}/{'dist' if distributed else 'plain'}"
            assert result[f"{tag}/states"] > 0, tag  # Adam moments exist (and, in bf16, fp32 main params)
            assert result[f"{tag}/freed"] == result[f"{tag}/bytes_before"] > 0, tag
            assert result[f"{tag}/bytes_offloaded"] == 0, tag  # every storage really released
            assert result[f"{tag}/identical"] == result[f"{tag}/params_identical"] == 1.0, tag
            assert result[f"{tag}/grads_zero"] == 1.0, tag  # grads come back zeroed (dropped, not copied)
            assert result[f"{tag}/bytes_loaded"] == result[f"{tag}/bytes_before"], tag
        # bf16 params: the fp32 main params are offloaded too (measured on rank 0, distributed: 27 tensors vs 20)
        for kind in ("dist", "plain"):
            assert result[f"bfloat16/{kind}/states"] > result[f"float32/{kind}/states"], kind


_OFFLOAD_ALL = ("actor_rollout_ref.actor.megatron.param_offload=True",
                "actor_rollout_ref.actor.megatron.grad_offload=True",
                "actor_rollout_ref.actor.megatron.optimizer_offload=True",
                "actor_rollout_ref.ref.megatron.param_offload=True")


def _policy_run(rank: int, model_dir: str, checkpoint_dir: str) -> dict:
    """Off, then on (same process, same grid): log-probs → update → log-probs → update → log-probs, reference
    log-probs and greedy generation; records the bytes the actor and the reference hold between calls."""
    from hybridrl.workers.megatron import offload
    from hybridrl.workers.megatron.worker import MegatronActorRolloutRefWorker

    result: dict = {}
    for mode, overrides in (("off", ()), ("on", _OFFLOAD_ALL)):
        config = policy_config(model_dir, 2, "actor_rollout_ref.rollout.response_length=4", *overrides)
        worker = MegatronActorRolloutRefWorker(config, role="actor_rollout_ref")
        worker.init_model()
        actor = worker.actor_model
        actor_tensors = offload.model_param_tensors(actor) + offload.model_grad_tensors(actor)
        ref_tensors = offload.model_param_tensors(worker.ref_policy.megatron_model)
        held = [_stored_bytes(actor_tensors) + _stored_bytes(ref_tensors)]
        data = policy_batch(seed=1)
        for step in range(2):
            log_probs = worker.compute_log_prob(data).batch["old_log_probs"]
            result[f"{mode}/log_probs{step}"] = log_probs
            data.batch["old_log_probs"] = log_probs + 0.01 * data.batch["response_mask"]  # off-policy: clipping
            metrics = worker.update_actor(data).meta_info["metrics"]
            result.update({f"{mode}/{key}{step}": float(metrics[key][0] if isinstance(metrics[key], list)
                                                           else metrics[key]) for key in _ACTOR_METRICS})
            held.append(_stored_bytes(actor_tensors + offload.optimizer_tensors(worker._megatron_optimizer())))
        result[f"{mode}/log_probs2"] = worker.compute_log_prob(policy_batch(seed=2)).batch["old_log_probs"]
        result[f"{mode}/ref"] = worker.compute_ref_log_prob(data).batch["ref_log_prob"]
        generated = worker.generate_sequences(greedy_prompts(seed=2))
        result[f"{mode}/responses"] = generated.batch["responses"]
        result[f"{mode}/verified"] = float(generated.meta_info["metrics"]["rollout/weight_sync_verified_tensors"])
        held.append(_stored_bytes(actor_tensors + ref_tensors + offload.optimizer_tensors(worker._megatron_optimizer())))
        result[f"{mode}/held_between_calls"] = torch.tensor(held, dtype=torch.float64)
        result[f"{mode}/states"] = float(len(offload.optimizer_tensors(worker._megatron_optimizer())))
        result.update(_checkpoint_round_trip(worker, mode, actor_tensors, f"{checkpoint_dir}/{mode}"))
    return result


def _checkpoint_round_trip(worker, mode: str, actor_tensors: list[torch.Tensor], folder: str) -> dict:
    """Save (the offloaded actor comes back for it), load into the same worker, score again: equal to before."""
    from hybridrl.workers.megatron import offload

    worker.save_checkpoint(folder, global_step=2)
    worker.load_checkpoint(folder)
    held = _stored_bytes(actor_tensors + offload.optimizer_tensors(worker._megatron_optimizer()))
    log_probs = worker.compute_log_prob(policy_batch(seed=2)).batch["old_log_probs"]
    return {f"{mode}/log_probs_reloaded": log_probs, f"{mode}/held_after_checkpoint": float(held)}


def test_policy_worker_with_all_offloads_equals_without(tmp_path, tiny_gqa_qwen2_dir):
    for result in run_ranks(_policy_run, 2, tmp_path / "policy", tiny_gqa_qwen2_dir,
                            str(tmp_path / "checkpoints")):
        for key in ("log_probs0", "log_probs1", "log_probs2", "ref", "responses", "log_probs_reloaded"):
            assert torch.equal(result[f"on/{key}"], result[f"off/{key}"]), key
        for step in range(2):
            for key in _ACTOR_METRICS:
                assert result[f"on/{key}{step}"] == result[f"off/{key}{step}"], (key, step)
        assert not torch.equal(result["off/log_probs1"], result["off/log_probs0"])  # the first update moved them
        assert result["on/verified"] > 0 and result["on/states"] > 0
        assert (result["off/held_between_calls"] > 0).all()
        assert (result["on/held_between_calls"] == 0).all()  # params, grads, optimizer, reference: all released
        assert torch.equal(result["on/log_probs_reloaded"], result["on/log_probs2"])  # checkpoint save → load
        assert result["on/held_after_checkpoint"] == 0 < result["off/held_after_checkpoint"]


_CRITIC_OFFLOAD_ALL = ("critic.megatron.param_offload=True", "critic.megatron.grad_offload=True",
                       "critic.megatron.optimizer_offload=True")


def _critic_run(rank: int, model_dir: str) -> dict:
    """Off, then on, at DP=2: values of the batch → update on this rank's half, twice, then values."""
    from hybridrl.workers.megatron import offload
    from hybridrl.workers.megatron.critic_worker import MegatronCriticWorker

    result: dict = {}
    for mode, overrides in (("off", ()), ("on", _CRITIC_OFFLOAD_ALL)):
        worker = MegatronCriticWorker(critic_config(model_dir, 1, "megatron", *overrides))
        worker.init_model()
        tensors = offload.model_param_tensors(worker.critic_model) + offload.model_grad_tensors(worker.critic_model)
        held = [_stored_bytes(tensors)]
        data = policy_batch(seed=1)
        for step in range(2):
            values = worker.compute_values(data).batch["values"]
            result[f"{mode}/values{step}"] = values
            half = critic_update_batch(data, values).slice(2 * rank, 2 * rank + 2)  # this DP rank's mini-batch
            metrics = worker.update_critic(half).meta_info["metrics"]
            result.update({f"{mode}/{key}{step}": float(torch.tensor(metrics[key], dtype=torch.float64).mean())
                           for key in _CRITIC_METRICS})
            held.append(_stored_bytes(tensors + offload.optimizer_tensors(worker.critic_optimizer.optimizer)))
        result[f"{mode}/values2"] = worker.compute_values(policy_batch(seed=2)).batch["values"]
        result[f"{mode}/held_between_calls"] = torch.tensor(held, dtype=torch.float64)
        result[f"{mode}/states"] = float(len(offload.optimizer_tensors(worker.critic_optimizer.optimizer)))
        result.update(_reward_model_scores(model_dir, mode))
    return result


def _reward_model_scores(model_dir: str, mode: str) -> dict:
    """The Megatron reward model (the tiny model's seeded HF head) with ``param_offload`` off / on, scored twice."""
    from config_testlib import compose_config

    from hybridrl.workers.megatron import offload
    from hybridrl.workers.megatron.reward_model_worker import MegatronRewardModelWorker

    overrides = [f"actor_rollout_ref.model.path={model_dir}", f"reward_model.model.path={model_dir}",
                 "reward_model.enable=True", "reward_model.model.input_tokenizer=null",
                 "reward_model.micro_batch_size_per_gpu=2", "data.train_batch_size=4",
                 f"reward_model.megatron.param_offload={mode == 'on'}"]
    worker = MegatronRewardModelWorker(compose_config("ppo_megatron_trainer", overrides).reward_model)
    worker.init_model()
    tensors = offload.model_param_tensors(worker.reward_model)
    held = [_stored_bytes(tensors)]
    scores = []
    for seed in (1, 1):
        scores.append(worker.compute_rm_score(policy_batch(seed=seed)).batch["rm_scores"])
        held.append(_stored_bytes(tensors))
    return {f"{mode}/rm_scores": scores[0], f"{mode}/rm_scores_again": scores[1],
            f"{mode}/rm_held_between_calls": torch.tensor(held, dtype=torch.float64)}


def test_critic_and_reward_model_workers_with_offload_equal_without(tmp_path, tiny_gqa_qwen2_dir):
    ranks = run_ranks(_critic_run, 2, tmp_path / "critic", tiny_gqa_qwen2_dir)
    for result in ranks:
        for key in ("values0", "values1", "values2"):
            assert torch.equal(result[f"on/{key}"], result[f"off/{key}"]), key
        for step in range(2):
            for key in _CRITIC_METRICS:
                assert result[f"on/{key}{step}"] == result[f"off/{key}{step}"], (key, step)
        assert not torch.equal(result["off/values1"], result["off/values0"])  # the first update moved the values
        assert result["on/states"] > 0
        assert (result["off/held_between_calls"] > 0).all()
        assert (result["on/held_between_calls"] == 0).all()
        for key in ("rm_scores", "rm_scores_again"):  # the reward model's param_offload
            assert torch.equal(result[f"on/{key}"], result["off/rm_scores"]), key
        assert result["off/rm_scores"].abs().max() > 0
        assert (result["off/rm_held_between_calls"] > 0).all() and (result["on/rm_held_between_calls"] == 0).all()
    torch.testing.assert_close(ranks[1]["on/values2"], ranks[0]["on/values2"], rtol=0, atol=0)  # DP replicas agree
