"""Ulysses sequence parallelism: the re-partitioning functions by hand, and SP=2 ≡ SP=1 over gloo (slow)."""

from __future__ import annotations

import pytest
import torch
from config_testlib import compose_section

from hybridrl.models.transformers.ulysses_attention import register_ulysses_attention
from hybridrl.utils import ulysses
from tests.workers.engine.engine_testlib import run_ranks


def test_pad_and_slice_by_hand():
    ids = torch.tensor([[11, 12, 13, 14, 15]])  # nnz = 5, sp = 2 → pad 1 → [11 12 13 | 14 15 0]
    pos = torch.tensor([[0, 1, 2, 0, 1]])
    a_ids, a_pos, pad = ulysses.ulysses_pad_and_slice_inputs(ids, pos, sp_size=2, sp_rank=0)
    b_ids, b_pos, _ = ulysses.ulysses_pad_and_slice_inputs(ids, pos, sp_size=2, sp_rank=1)
    assert pad == 1
    assert a_ids.tolist() == [[11, 12, 13]] and b_ids.tolist() == [[14, 15, 0]]
    assert a_pos.tolist() == [[0, 1, 2]] and b_pos.tolist() == [[0, 1, 0]]  # the pad starts its own sequence
    same, no_pad = ulysses.pad_to_multiple(torch.arange(6), 3)
    assert no_pad == 0 and same.tolist() == list(range(6))
    with pytest.raises(ValueError, match="not divisible"):
        ulysses.slice_for_rank(torch.arange(5), 0, 2)


def test_packed_causal_mask_by_hand():
    # sequences [0 1 2] [0 1] [0]: causal inside each block, nothing across blocks
    mask = ulysses.packed_causal_mask(torch.tensor([0, 1, 2, 0, 1, 0]))
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0],
            [1, 1, 1, 0, 0, 0],
            [0, 0, 0, 1, 0, 0],
            [0, 0, 0, 1, 1, 0],
            [0, 0, 0, 0, 0, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(mask, expected)


# ----------------------------------------------------------------------------- 2 gloo ranks


def _sp_checks(rank: int, model_dir: str) -> dict:
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from hybridrl.utils.torch_functional import compute_position_id_with_mask, logprobs_from_logits
    from hybridrl.workers.actor.forward import forward_response

    name = register_ulysses_attention()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation=name)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 500, (3, 11), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    mask[2, :1] = 0
    mask[1, -2:] = 0
    mask[2, -1:] = 0  # nnz = 33 - 6 = 27: odd, so the last SP rank gets one pad token
    batch = {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": compute_position_id_with_mask(mask),
        "responses": ids[:, -5:],
    }
    weights = torch.randn(3, 5, generator=gen) * mask[:, -5:]

    def run() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad()
        (log_probs,) = forward_response(model, batch, True, lambda lg, nt: [logprobs_from_logits(lg, nt)])
        (log_probs * weights).sum().backward()
        return log_probs.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    plain_lp, plain_grads = run()
    ulysses.mark_sequence_parallel(model, dist.group.WORLD)
    sp_lp, sp_grads = run()
    for grad in sp_grads.values():  # what FSDP's reduce-scatter does: average over the dp·sp ranks
        dist.all_reduce(grad)
        grad /= dist.get_world_size()
    return {"plain_lp": plain_lp, "sp_lp": sp_lp, "plain_grads": plain_grads, "sp_grads": sp_grads}


def _worker_checks(rank: int, model_dir: str) -> dict:
    """ActorRolloutRefWorker: log-probs, one update and the log-probs after it (any world size)."""
    import torch.distributed as dist

    from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker

    world = dist.get_world_size()
    extra = [f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={world}"] if world > 1 else []
    worker = ActorRolloutRefWorker(_sp_config(model_dir, *extra).actor_rollout_ref, role="actor_rollout")
    worker.init_model()
    data = _worker_batch().chunk(world)[rank]
    before = worker.compute_log_prob(data).batch["old_log_probs"]
    data.batch["old_log_probs"] = before
    metrics = worker.update_actor(data).meta_info["metrics"]
    after = worker.compute_log_prob(_worker_batch().chunk(world)[rank]).batch["old_log_probs"]
    return {"before": before, "after": after, "pg_loss": metrics["actor/pg_loss"], "sp": worker.ulysses.sp_size}


def _sp_config(model_dir: str, *extra: str):
    from config_testlib import compose_config

    return compose_config(
        "ppo_trainer",
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.model.use_remove_padding=True",
            "actor_rollout_ref.model.enable_gradient_checkpointing=False",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.optim.lr=1e-2",
            "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.rollout.dtype=float32",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
            "data.train_batch_size=4",
            *extra,
        ],
    )


def _worker_batch():
    from hybridrl.protocol import DataProto
    from hybridrl.utils.torch_functional import compute_position_id_with_mask

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 500, (4, 11), generator=gen)
    mask = torch.ones_like(ids)
    for row in range(4):
        mask[row, : row % 3] = 0
        mask[row, 11 - (row % 2) :] = 0
    tensors = {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": compute_position_id_with_mask(mask),
        "responses": ids[:, 6:],
        "response_mask": mask[:, 6:],
        "advantages": torch.randn(4, 5, generator=gen) * mask[:, 6:],
        "old_log_probs": torch.zeros(4, 5),
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0})


def _critic_checks(rank: int, model_dir: str) -> dict:
    """CriticWorker: values, one value-loss update and the values after it (any world size)."""
    import torch.distributed as dist

    from hybridrl.workers.fsdp_workers import CriticWorker

    world = dist.get_world_size()
    extra = [f"critic.ulysses_sequence_parallel_size={world}"] if world > 1 else []
    worker = CriticWorker(_sp_config(model_dir, *_critic_overrides(model_dir), *extra).critic)
    worker.init_model()
    data = _worker_batch().chunk(world)[rank]
    before = worker.compute_values(data).batch["values"]
    data.batch["values"] = before
    returns = torch.linspace(-1.0, 1.0, 20).reshape(4, 5)  # of the whole batch, so every world size sees the same
    data.batch["returns"] = returns.chunk(world)[rank] * data.batch["response_mask"]
    metrics = worker.update_critic(data).meta_info["metrics"]
    after = worker.compute_values(_worker_batch().chunk(world)[rank]).batch["values"]
    return {"before": before, "after": after, "vf_loss": metrics["critic/vf_loss"], "sp": worker.ulysses.sp_size}


def _critic_overrides(model_dir: str) -> list[str]:
    return [
        "algorithm.adv_estimator=gae",
        f"critic.model.path={model_dir}",
        "critic.model.use_remove_padding=True",
        "critic.model.enable_gradient_checkpointing=False",
        "critic.ppo_mini_batch_size=4",
        "critic.ppo_micro_batch_size_per_gpu=2",
        "critic.optim.lr=1e-2",
        "critic.cliprange_value=100.0",
    ]


def _reward_model_checks(rank: int, model_dir: str) -> dict:
    """RewardModelWorker: rm_scores of this rank's rows (any world size)."""
    import torch.distributed as dist

    from hybridrl.workers.fsdp_workers import RewardModelWorker

    world = dist.get_world_size()
    overrides = [
        "reward_model.enable=True",
        f"reward_model.model.path={model_dir}",
        f"reward_model.model.input_tokenizer={model_dir}",
        "reward_model.model.use_remove_padding=True",
        "reward_model.micro_batch_size_per_gpu=2",
    ]
    if world > 1:
        overrides.append(f"reward_model.ulysses_sequence_parallel_size={world}")
    worker = RewardModelWorker(_sp_config(model_dir, *overrides).reward_model)
    worker.init_model()
    scores = worker.compute_rm_score(_worker_batch().chunk(world)[rank]).batch["rm_scores"]
    return {"scores": scores, "sp": worker.ulysses.sp_size}


_CHECKS = {"model": _sp_checks, "worker": _worker_checks, "critic": _critic_checks, "rm": _reward_model_checks}


def _check_on_rank(rank: int, world: int, check: str, model_dir: str) -> dict:
    return _CHECKS[check](rank, model_dir)


def _run(check: str, world: int, model_dir: str) -> list[dict]:
    return run_ranks(_check_on_rank, world, check, model_dir)


def _single_and_sp2(check: str, model_dir: str) -> tuple[dict, list[dict]]:
    """The check on 1 rank without SP and on 2 ranks forming one SP group."""
    (single,) = _run(check, 1, model_dir)
    sp = _run(check, 2, model_dir)
    assert [r["sp"] for r in sp] == [2, 2] and single["sp"] == 1
    return single, sp


@pytest.mark.slow
def test_sp2_equals_sp1_log_probs_and_gradients(tiny_model_dir):
    for out in _run("model", 2, tiny_model_dir):
        torch.testing.assert_close(out["sp_lp"], out["plain_lp"], rtol=1e-5, atol=1e-5)
        assert (out["plain_lp"] != 0).any()
        for name, grad in out["plain_grads"].items():
            torch.testing.assert_close(out["sp_grads"][name], grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("check", "loss_key", "min_move"),
    [("worker", "pg_loss", 1e-4), ("critic", "vf_loss", 1e-3)],  # actor log-probs / critic values
    ids=["actor", "critic"],
)
def test_trainable_worker_sp2_matches_single_rank(tiny_model_dir, check, loss_key, min_move):
    """2 ranks in one SP group (dp=1) give the outputs before and after one update, and the loss, of 1 rank
    without SP on the same batch."""
    single, sp = _single_and_sp2(check, tiny_model_dir)
    for key in ("before", "after"):
        torch.testing.assert_close(torch.cat([r[key] for r in sp]), single[key], rtol=1e-5, atol=1e-5)
    assert (single["after"] - single["before"]).abs().max() > min_move  # the update moved the outputs
    torch.testing.assert_close(torch.tensor(sp[0][loss_key]), torch.tensor(single[loss_key]), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_reward_model_sp2_matches_single_rank(tiny_model_dir):
    single, sp = _single_and_sp2("rm", tiny_model_dir)
    torch.testing.assert_close(torch.cat([r["scores"] for r in sp]), single["scores"], rtol=1e-5, atol=1e-5)
    assert (single["scores"] != 0).sum() == 4  # one score per row, on its last valid response token


def test_critic_worker_refuses_sp_without_remove_padding():
    from hybridrl.workers.sharding_manager.fsdp_ulysses import sp_group_from_config

    def critic(sp: int):
        return compose_section("critic", ulysses_sequence_parallel_size=sp, model__use_remove_padding=False)

    assert sp_group_from_config(critic(1), "critic") is None  # no SP: nothing to check, no group
    with pytest.raises(ValueError, match="critic.model.use_remove_padding=True"):
        sp_group_from_config(critic(2), "critic")


def test_worker_refuses_sp_without_remove_padding(tiny_model_dir, monkeypatch):
    from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker

    config = _sp_config(
        tiny_model_dir,
        "actor_rollout_ref.model.use_remove_padding=False",
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
    )
    worker = object.__new__(ActorRolloutRefWorker)  # only the SP check, no process group needed
    worker.config, worker._is_actor, worker._is_ref = config.actor_rollout_ref, True, False
    with pytest.raises(ValueError, match="use_remove_padding=True"):
        worker._build_sp_group()
