"""The FSDP worker classes called directly in one process (WORLD_SIZE=1, FSDP2/FSDP1 over gloo)."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from fsdp_workers_testlib import RESPONSE_LEN, hf_response_log_probs, ppo_batch, ppo_config

from hybridrl.single_controller.base.decorator import Dispatch

pytestmark = pytest.mark.usefixtures("single_rank_env")  # a 1-rank gloo group (tests/workers/conftest.py)


@pytest.fixture(scope="module")
def actor_worker(tiny_model_dir):
    from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker

    worker = ActorRolloutRefWorker(ppo_config(tiny_model_dir).actor_rollout_ref, role="actor")
    worker.init_model()
    return worker


def test_methods_are_registered_as_verl(tiny_model_dir):
    from hybridrl.single_controller.base.decorator import MAGIC_ATTR
    from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker, RewardModelWorker

    def mode(cls, name):
        return getattr(getattr(cls, name), MAGIC_ATTR)["dispatch_mode"]

    for name in ("init_model", "save_checkpoint", "load_checkpoint"):
        assert mode(ActorRolloutRefWorker, name) == Dispatch.ONE_TO_ALL
    for name in ("generate_sequences", "compute_log_prob", "compute_ref_log_prob", "update_actor"):
        assert mode(ActorRolloutRefWorker, name) == Dispatch.DP_COMPUTE_PROTO
    assert mode(CriticWorker, "compute_values") == Dispatch.DP_COMPUTE_PROTO
    assert mode(CriticWorker, "update_critic") == Dispatch.DP_COMPUTE_PROTO
    assert mode(RewardModelWorker, "compute_rm_score") == Dispatch.DP_COMPUTE_PROTO


def test_actor_plan_is_per_rank_and_config_untouched(tiny_model_dir):
    from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker

    cfg = ppo_config(tiny_model_dir, "actor_rollout_ref.rollout.n=2")
    worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor")
    assert worker.plan.actor.mini_batch_samples_per_rank == 8  # 4 prompts × n=2 ÷ 1 rank
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 4  # the caller's config is untouched
    assert worker.config.actor.ppo_mini_batch_size == 4  # and so is the worker's: sizes live in the plan
    bad = ppo_config(tiny_model_dir, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3")
    with pytest.raises(ValueError, match="ppo_micro_batch_size_per_gpu"):
        ActorRolloutRefWorker(bad.actor_rollout_ref, role="actor")


def test_compute_log_prob_matches_hf_and_ref(actor_worker, tiny_model_dir):
    from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker

    data = ppo_batch()
    out = actor_worker.compute_log_prob(data)
    assert set(out.batch.keys()) == {"old_log_probs", "entropys"}
    assert out.batch["old_log_probs"].shape == (4, RESPONSE_LEN)
    mask = data.batch["response_mask"].bool()  # columns padded in a whole micro-batch are skipped (0)
    expected = hf_response_log_probs(tiny_model_dir, data.batch)
    torch.testing.assert_close(out.batch["old_log_probs"][mask], expected[mask], rtol=1e-5, atol=1e-5)

    ref_worker = ActorRolloutRefWorker(ppo_config(tiny_model_dir).actor_rollout_ref, role="ref")
    ref_worker.init_model()
    ref = ref_worker.compute_ref_log_prob(ppo_batch())
    torch.testing.assert_close(ref.batch["ref_log_prob"][mask], expected[mask], rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="actor role"):
        ref_worker.update_actor(ppo_batch())


def test_sum_pi_squared_from_compute_log_prob_feeds_the_token_baseline(actor_worker, tiny_model_dir):
    """With actor.calculate_sum_pi_squared the log-prob pass adds sum_pi_squared [B, R] (Σ_v π(v)² per response
    token), the driver's old_log_prob stage carries it into the batch and the advantage stage computes OTB from it."""
    from hybridrl.trainer.ppo import core_algos, stages

    config = ppo_config(
        tiny_model_dir,
        "algorithm.adv_estimator=optimal_token_baseline",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.calculate_sum_pi_squared=True",
    )
    settings = stages.StepSettings.from_config(config, SimpleNamespace(eos_token_id=2, pad_token_id=0))
    data = ppo_batch()
    data.pop(batch_keys=["old_log_probs"])
    data.non_tensor_batch["uid"] = np.array(["a", "a", "b", "b"], dtype=object)
    mask = data.batch["response_mask"]
    last = mask.sum(-1) - 1  # score 1 on the last response token of rows 0 and 2
    data.batch["token_level_scores"] = torch.zeros(4, RESPONSE_LEN).index_put_(
        (torch.arange(4), last), torch.tensor([1.0, 0.0, 1.0, 0.0])
    )
    actor_config = actor_worker.config.actor  # the module's worker: the flag on for this pass only
    actor_config.calculate_sum_pi_squared = True
    try:
        batch, _ = stages.old_log_prob(data, actor_worker, settings)
    finally:
        actor_config.calculate_sum_pi_squared = False
    sum_pi_squared = batch.batch["sum_pi_squared"]
    assert sum_pi_squared.shape == (4, RESPONSE_LEN) and sum_pi_squared.dtype == torch.float32
    with torch.no_grad():  # the worker's current weights at rollout.temperature = 1
        logits = actor_worker.actor_module(
            input_ids=data.batch["input_ids"],
            attention_mask=data.batch["attention_mask"],
            position_ids=data.batch["position_ids"],
        ).logits[:, -RESPONSE_LEN - 1 : -1]
    expected = torch.softmax(logits.float(), dim=-1).pow(2).sum(-1)
    valid = mask.bool()
    torch.testing.assert_close(sum_pi_squared[valid], expected[valid], rtol=1e-5, atol=1e-7)

    batch, _ = stages.advantage(batch, settings, None, global_steps=1)
    rewards, old_log_probs = batch.batch["token_level_rewards"], batch.batch["old_log_probs"]
    optimal_token_baseline = core_algos.get_adv_estimator_fn("optimal_token_baseline")
    expected_advantages, _ = optimal_token_baseline(
        rewards, mask, data.non_tensor_batch["uid"], old_log_probs, sum_pi_squared
    )
    torch.testing.assert_close(batch.batch["advantages"], expected_advantages)
    assert bool(batch.batch["advantages"][valid].abs().gt(0).any())


def test_update_actor_returns_verl_metrics_and_changes_log_probs(actor_worker):
    data = ppo_batch(seed=1)
    before = actor_worker.compute_log_prob(ppo_batch(seed=1)).batch["old_log_probs"]
    data.batch["old_log_probs"] = before
    metrics = actor_worker.update_actor(data).meta_info["metrics"]
    for key in ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower", "actor/grad_norm"):
        assert key in metrics
    assert len(metrics["actor/pg_clipfrac"]) == 2  # mini 4 / micro 2
    assert len(metrics["actor/pg_loss"]) == 1  # the mini-batch loss, its micro-batch shares added (verl 0.9)
    assert metrics["actor/lr"] == pytest.approx(1e-3)
    assert {"perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb", "perf/cpu_memory_used_gb"} <= set(metrics)
    after = actor_worker.compute_log_prob(ppo_batch(seed=1)).batch["old_log_probs"]
    assert (after - before).abs().max() > 1e-4


def test_critic_worker_values_and_update(tiny_model_dir):
    from hybridrl.workers.fsdp_workers import CriticWorker

    worker = CriticWorker(ppo_config(tiny_model_dir).critic)
    worker.init_model()
    data = ppo_batch()
    values = worker.compute_values(data).batch["values"]
    mask = data.batch["response_mask"].bool()
    assert values.shape == (4, RESPONSE_LEN)
    assert bool((values[~mask] == 0).all()) and bool((values[mask] != 0).all())
    metrics = worker.update_critic(data).meta_info["metrics"]
    for key in ("critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm", "critic/lr"):
        assert key in metrics
    assert metrics["critic/lr"] == pytest.approx(1e-3)


def _reward_worker(cfg):
    from hybridrl.workers.fsdp_workers import RewardModelWorker

    worker = RewardModelWorker(cfg.reward_model)
    worker.init_model()
    return worker


def test_reward_model_scores_last_valid_response_token(tiny_model_dir):
    torch.manual_seed(0)  # the score head is freshly initialised
    worker = _reward_worker(ppo_config(tiny_model_dir))
    data = ppo_batch()
    rm_scores = worker.compute_rm_score(data).batch["rm_scores"]
    assert rm_scores.shape == (4, RESPONSE_LEN)
    batch = data.batch
    with torch.no_grad():
        logits = worker.reward_module(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits.squeeze(-1)
    valid_lengths = batch["response_mask"].sum(-1)  # 5, 4, 3, 2
    for row, length in enumerate(valid_lengths.tolist()):
        last = 6 + length - 1  # prompt is 6 wide, the response starts at 6
        assert rm_scores[row, length - 1] == pytest.approx(logits[row, last].item(), abs=1e-5)
        others = torch.cat([rm_scores[row, : length - 1], rm_scores[row, length:]])
        assert bool((others == 0).all())


# The RM's own template: other role markers and separators than the policy's Qwen-style template.
RM_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|endoftext|>### ' + message['role'] | upper + ':\\n' + message['content'] + '<|im_end|>' }}"
    "{% endfor %}"
)


@pytest.fixture
def rm_dir_with_own_template(tiny_model_dir, tmp_path):
    """A copy of the tiny Qwen2 model whose tokenizer carries ``RM_CHAT_TEMPLATE``."""
    from hybridrl.workers.engine import build_tokenizer

    rm_dir = tmp_path / "rm"
    shutil.copytree(tiny_model_dir, rm_dir)
    (rm_dir / "chat_template.jinja").write_text(RM_CHAT_TEMPLATE)
    assert build_tokenizer(str(rm_dir)).chat_template == RM_CHAT_TEMPLATE
    return str(rm_dir)


def _chat_ids(tokenizer, render_tokenizer, chat) -> torch.Tensor:
    """Ids ``[L]`` of ``chat`` rendered with ``render_tokenizer``'s template, tokenised by ``tokenizer``."""
    text = render_tokenizer.apply_chat_template(chat, add_generation_prompt=False, tokenize=False)
    return tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"][0]


@pytest.mark.parametrize("use_remove_padding", [False, True])
def test_reward_model_rerenders_chat_when_tokenizers_differ(
    rm_dir_with_own_template, tiny_llama_dir, use_remove_padding
):
    """input_tokenizer (the policy's) ≠ RM path: prompt + decoded response go through the RM's chat template."""
    from hybridrl.workers.engine import build_tokenizer

    torch.manual_seed(0)  # the score head is freshly initialised
    cfg = ppo_config(
        tiny_llama_dir,
        f"reward_model.model.path={rm_dir_with_own_template}",
        f"reward_model.model.input_tokenizer={tiny_llama_dir}",
        f"reward_model.model.use_remove_padding={use_remove_padding}",
        "reward_model.max_length=128",
    )
    worker = _reward_worker(cfg)
    policy_tok, rm_tok = build_tokenizer(tiny_llama_dir), build_tokenizer(rm_dir_with_own_template)
    data = ppo_batch(batch_size=3)  # valid response lengths 5, 4, 3; prompts left-padded by 0, 1, 2
    lengths = data.batch["response_mask"].sum(-1).tolist()
    eos_col = 6 + lengths[0] - 1  # row 0's response ends with the policy's EOS, which is not response text
    data.batch["input_ids"][0, eos_col] = policy_tok.eos_token_id
    data.batch["responses"][0, lengths[0] - 1] = policy_tok.eos_token_id
    chats = [[{"role": "user", "content": f"what is {i} plus {i}"}] for i in range(3)]
    raw_prompt = np.empty(3, dtype=object)
    raw_prompt[:] = chats
    data.non_tensor_batch["raw_prompt"] = raw_prompt

    rm_inputs = worker._switch_chat_template(data).batch
    assert rm_inputs["input_ids"].shape == (3, 128)
    rm_scores = worker.compute_rm_score(data).batch["rm_scores"]
    assert rm_scores.shape == (3, RESPONSE_LEN)
    for row, length in enumerate(lengths):
        text_length = length - 1 if row == 0 else length
        response = policy_tok.decode(data.batch["responses"][row, :text_length].tolist())
        chat = [*chats[row], {"role": "assistant", "content": response}]
        expected_ids = _chat_ids(rm_tok, rm_tok, chat)
        policy_template_ids = _chat_ids(rm_tok, policy_tok, chat)
        assert not torch.equal(expected_ids, policy_template_ids)
        n = expected_ids.numel()
        # (a) the RM input is exactly its own template's rendering, right-padded with the RM's pad id
        torch.testing.assert_close(rm_inputs["input_ids"][row, :n], expected_ids)
        assert bool((rm_inputs["input_ids"][row, n:] == rm_tok.pad_token_id).all())
        assert rm_inputs["attention_mask"][row].tolist() == [1] * n + [0] * (128 - n)
        with torch.no_grad():
            expected = worker.reward_module(input_ids=expected_ids[None]).logits[0, -1, 0]
            with_policy_template = worker.reward_module(input_ids=policy_template_ids[None]).logits[0, -1, 0]
        # (b) the score is the RM's output on those ids, not on the policy template's rendering
        assert rm_scores[row, length - 1] == pytest.approx(expected.item(), abs=1e-5)
        assert abs(with_policy_template.item() - expected.item()) > 1e-3
        # it sits on the last valid response token of the policy's layout; every other entry is 0
        others = torch.cat([rm_scores[row, : length - 1], rm_scores[row, length:]])
        assert bool((others == 0).all())


def test_actor_rollout_ref_generates_and_resyncs_after_update(tiny_model_dir):
    """Hybrid engine with the hf rollout: generation follows the actor; an update marks weights stale."""
    from hybridrl.protocol import DataProto
    from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker

    cfg = ppo_config(
        tiny_model_dir,
        "actor_rollout_ref.rollout.response_length=4",
        "actor_rollout_ref.rollout.prompt_length=6",
        "actor_rollout_ref.rollout.do_sample=False",
    )
    worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor_rollout_ref")
    worker.init_model()
    batch = ppo_batch()
    prompts = DataProto.from_dict(
        tensors={key: batch.batch[key][:, :6] for key in ("input_ids", "attention_mask", "position_ids")},
        meta_info={"do_sample": False},
    )
    assert worker.rollout.weights_stale  # nothing synced yet
    out = worker.generate_sequences(prompts)
    assert out.batch["responses"].shape == (4, 4) and out.batch["input_ids"].shape == (4, 10)
    assert not worker.rollout.weights_stale
    # the generated tokens are scored by the actor and the reference alike before any update
    scored = out.union(DataProto.from_dict(tensors={"response_mask": out.batch["attention_mask"][:, -4:]}))
    old = worker.compute_log_prob(scored).batch["old_log_probs"]
    ref = worker.compute_ref_log_prob(scored).batch["ref_log_prob"]
    torch.testing.assert_close(old, ref, rtol=1e-5, atol=1e-5)
    update = ppo_batch()
    update.batch["old_log_probs"] = worker.compute_log_prob(ppo_batch()).batch["old_log_probs"]
    worker.update_actor(update)
    assert worker.rollout.weights_stale
    worker.generate_sequences(prompts)
    assert not worker.rollout.weights_stale


def test_actor_checkpoint_round_trip_marks_rollout_stale(tiny_model_dir, tmp_path):
    from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker

    cfg = ppo_config(tiny_model_dir, "actor_rollout_ref.rollout.response_length=4")
    worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor_rollout")
    worker.init_model()
    probe = ppo_batch(seed=7)

    def train_step(seed):
        data = ppo_batch(seed=seed)
        data.batch["old_log_probs"] = worker.compute_log_prob(ppo_batch(seed=seed)).batch["old_log_probs"]
        worker.update_actor(data)

    train_step(1)
    saved = worker.compute_log_prob(probe).batch["old_log_probs"]
    saved_lr_steps = worker.actor_lr_scheduler.last_epoch
    ckpt = str(tmp_path / "global_step_1" / "actor")
    worker.save_checkpoint(ckpt, global_step=1)
    train_step(2)
    assert (worker.compute_log_prob(probe).batch["old_log_probs"] - saved).abs().max() > 1e-5
    worker.rollout._stale = False  # pretend the rollout is in sync before loading
    worker.load_checkpoint(ckpt)
    torch.testing.assert_close(worker.compute_log_prob(probe).batch["old_log_probs"], saved, rtol=0, atol=0)
    assert worker.actor_lr_scheduler.last_epoch == saved_lr_steps
    assert worker.rollout.weights_stale


def test_critic_checkpoint_round_trip(tiny_model_dir, tmp_path):
    from hybridrl.workers.fsdp_workers import CriticWorker

    worker = CriticWorker(ppo_config(tiny_model_dir).critic)
    worker.init_model()
    worker.update_critic(ppo_batch())
    saved = worker.compute_values(ppo_batch()).batch["values"]
    ckpt = str(tmp_path / "critic")
    worker.save_checkpoint(ckpt, global_step=1)
    worker.update_critic(ppo_batch())
    worker.load_checkpoint(ckpt, del_local_after_load=False)
    torch.testing.assert_close(worker.compute_values(ppo_batch()).batch["values"], saved, rtol=0, atol=0)


def test_fsdp1_strategy_matches_fsdp2_update(tiny_model_dir):
    """strategy=fsdp (FSDP1) and the default fsdp2 take the same step from the same weights."""
    from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker

    results = []
    for strategy in ("fsdp", "fsdp2"):
        cfg = ppo_config(tiny_model_dir, f"actor_rollout_ref.actor.strategy={strategy}")
        worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor")
        worker.init_model()
        metrics = worker.update_actor(ppo_batch(seed=3)).meta_info["metrics"]
        results.append(
            (metrics["actor/grad_norm"][0], worker.compute_log_prob(ppo_batch(seed=4)).batch["old_log_probs"])
        )
    (norm_fsdp1, lp_fsdp1), (norm_fsdp2, lp_fsdp2) = results
    assert norm_fsdp1 == pytest.approx(norm_fsdp2, rel=1e-5)
    torch.testing.assert_close(lp_fsdp1, lp_fsdp2, rtol=1e-5, atol=1e-5)


def test_bf16_mixed_precision_actor_gives_fp32_log_probs_close_to_fp32(tiny_model_dir):
    """``+fsdp_config.mixed_precision.param_dtype=bf16`` on CPU (the quickstart's speed setting): matmuls in bf16,
    log-softmax in fp32 (as verl's fused cross-entropy), master weights fp32; log-probs stay close to fp32's."""
    from hybridrl.workers.fsdp_workers import ActorRolloutRefWorker

    config = ppo_config(tiny_model_dir, "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16")
    worker = ActorRolloutRefWorker(config.actor_rollout_ref, role="actor")
    worker.init_model()
    data = ppo_batch(seed=3)
    mask = data.batch["response_mask"].bool()
    fp32 = hf_response_log_probs(tiny_model_dir, data.batch)
    bf16 = worker.compute_log_prob(data).batch["old_log_probs"]
    assert bf16.dtype == torch.float32
    assert not torch.equal(bf16[mask], fp32[mask])  # the matmuls did run in bf16
    torch.testing.assert_close(bf16[mask], fp32[mask], atol=0.1, rtol=0.02)
    assert all(p.dtype == torch.float32 for p in worker.actor_module.parameters())  # fp32 master weights
    data.batch["old_log_probs"] = bf16
    metrics = worker.update_actor(data).meta_info["metrics"]
    assert np.isfinite(metrics["actor/grad_norm"]).all() and metrics["actor/pg_loss"]
