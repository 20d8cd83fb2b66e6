"""algorithm.rollout_correction in the config: verl 0.9's defaults, and each bad setting names its key and fix."""

from __future__ import annotations

import warnings

import pytest

from hybridrl.config import ConfigError, collect_problems, compose_config, validate_config

SECTION = "algorithm.rollout_correction"
LOG_PROBS = "actor_rollout_ref.rollout.calculate_log_probs=True"


def test_defaults_are_verl_09s():
    section = compose_config("ppo_trainer", []).algorithm.rollout_correction
    assert dict(section) == {
        "rollout_is": None, "rollout_is_threshold": 2.0, "rollout_rs": None, "rollout_rs_threshold": None,
        "bypass_mode": False, "loss_type": "ppo_clip", "rollout_is_batch_normalize": False,
    }


@pytest.mark.parametrize(
    "overrides",
    [
        [f"{SECTION}.rollout_is=token", LOG_PROBS],
        [f"{SECTION}.rollout_is=sequence", f"{SECTION}.rollout_is_threshold='0.5_5.0'", LOG_PROBS],
        [f"{SECTION}.rollout_rs='token_k1,seq_max_k2'", f"{SECTION}.rollout_rs_threshold='0.5_2.0,0.1'", LOG_PROBS],
        [f"{SECTION}.bypass_mode=True", f"{SECTION}.loss_type=reinforce", LOG_PROBS],
    ],
)
def test_valid_correction_settings_pass(cpu_overrides, overrides):
    validate_config(compose_config("ppo_trainer", [*cpu_overrides, *overrides]))


# (overrides, the key the problem must name, a word its message or fix must contain)
CASES = [
    ([f"{SECTION}.rollout_is=token", "actor_rollout_ref.rollout.calculate_log_probs=False"],
     "actor_rollout_ref.rollout.calculate_log_probs", "calculate_log_probs=True"),
    ([f"{SECTION}.bypass_mode=True", "actor_rollout_ref.rollout.calculate_log_probs=False"],
     "actor_rollout_ref.rollout.calculate_log_probs", "calculate_log_probs=True"),
    ([f"{SECTION}.rollout_is=geometric", LOG_PROBS], f"{SECTION}.rollout_is", "token"),
    ([f"{SECTION}.rollout_is=token", f"{SECTION}.rollout_is_threshold='2_1'", LOG_PROBS],
     f"{SECTION}.rollout_is_threshold", "lower bound"),
    ([f"{SECTION}.rollout_is=token", f"{SECTION}.rollout_is_threshold=-1", LOG_PROBS],
     f"{SECTION}.rollout_is_threshold", "> 0"),
    ([f"{SECTION}.rollout_rs=token_k4", f"{SECTION}.rollout_rs_threshold=2", LOG_PROBS],
     f"{SECTION}.rollout_rs", "seq_mean_k1"),
    ([f"{SECTION}.rollout_rs=token_k1", LOG_PROBS], f"{SECTION}.rollout_rs_threshold", "needs"),
    ([f"{SECTION}.rollout_rs=token_k2", f"{SECTION}.rollout_rs_threshold='0.1_2'", LOG_PROBS],
     f"{SECTION}.rollout_rs_threshold", "upper bound"),
    ([f"{SECTION}.loss_type=gspo", LOG_PROBS], f"{SECTION}.loss_type", "reinforce"),
    ([f"{SECTION}.rollout_is=token", "actor_rollout_ref.actor.recompute_old_log_prob=False", LOG_PROBS],
     "actor_rollout_ref.actor.recompute_old_log_prob", "bypass_mode=True"),
    ([f"{SECTION}.bypass_mode=True", "trainer.rollout_probs_diff_max_bound=0.1", LOG_PROBS],
     "trainer.rollout_probs_diff_max_bound", "bypass_mode"),
]


@pytest.mark.parametrize(("overrides", "key", "word"), CASES, ids=[case[1] + ":" + case[0][0] for case in CASES])
def test_each_problem_names_its_key_and_fix(cpu_overrides, overrides, key, word):
    problems = collect_problems(compose_config("ppo_trainer", [*cpu_overrides, *overrides]))
    found = [p for p in problems if p.key == key]
    assert found, f"no problem for {key}: {[str(p) for p in problems]}"
    assert any(word in f"{p.message} {p.fix}" for p in found), [str(p) for p in found]
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate_config(compose_config("ppo_trainer", [*cpu_overrides, *overrides]))


def test_bypass_warns_that_it_replaces_the_loss_mode(cpu_overrides):
    config = compose_config("ppo_trainer", [*cpu_overrides, f"{SECTION}.bypass_mode=True", LOG_PROBS,
                                            "actor_rollout_ref.actor.policy_loss.loss_mode=gspo"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        validate_config(config)
    assert any("replaces actor_rollout_ref.actor.policy_loss.loss_mode=gspo" in str(w.message) for w in caught)
