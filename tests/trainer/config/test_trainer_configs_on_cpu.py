"""``hybridrl.trainer.config``: verl's ``AlgoConfig`` and ``RolloutCorrectionConfig`` with its presets, over the
rollout-correction parser the math uses."""

import pytest

from hybridrl.algos.rollout_correction_config import RolloutCorrectionParams
from hybridrl.trainer.config import AlgoConfig, CheckpointConfig, KLControlConfig, RolloutCorrectionConfig
from hybridrl.workers.config import CheckpointConfig as WorkerCheckpointConfig

# preset -> (rollout_is, IS threshold, rollout_rs, RS threshold, bypass_mode, loss_type), verl 0.9's presets
PRESETS = {
    "decoupled_token_is": ("token", 2.0, None, None, False, "ppo_clip"),
    "decoupled_seq_is": ("sequence", 2.0, None, None, False, "ppo_clip"),
    "decoupled_token_icepop": ("token", "0.5_5.0", None, None, False, "ppo_clip"),
    "decoupled_seq_is_rs": ("sequence", 2.0, "seq_sum_k1", "0.5_2.0", False, "ppo_clip"),
    "decoupled_geo_rs": (None, None, "seq_mean_k1", "0.999_1.001", False, "ppo_clip"),
    "decoupled_k3_rs_token_tis": ("token", 2.0, "seq_mean_k3", 0.01, False, "ppo_clip"),
    "bypass_ppo_clip": (None, None, None, None, True, "ppo_clip"),
    "bypass_ppo_clip_k3_rs": (None, None, "seq_mean_k3", 0.01, True, "ppo_clip"),
    "bypass_pg_is": ("sequence", 2.0, None, None, True, "reinforce"),
    "bypass_pg_token_icepop": ("token", "0.5_5.0", None, None, True, "reinforce"),
    "bypass_pg_geo_rs_seq_tis": ("sequence", 2.0, "seq_mean_k1", "0.999_1.001", True, "reinforce"),
    "disabled": (None, None, None, None, False, "ppo_clip"),
}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets(name):
    rollout_is, is_threshold, rollout_rs, rs_threshold, bypass, loss_type = PRESETS[name]
    config = getattr(RolloutCorrectionConfig, name)()
    assert (config.rollout_is, config.rollout_rs, config.bypass_mode, config.loss_type) == (
        rollout_is,
        rollout_rs,
        bypass,
        loss_type,
    )
    if is_threshold is not None:
        assert config.rollout_is_threshold == is_threshold
    assert config.rollout_rs_threshold == rs_threshold
    assert isinstance(config.params(), RolloutCorrectionParams)  # every preset parses


def test_preset_arguments():
    assert RolloutCorrectionConfig.decoupled_token_icepop(4.0, 0.25).rollout_is_threshold == "0.25_4.0"
    assert RolloutCorrectionConfig.bypass_pg_is(threshold=3.0).rollout_is_threshold == 3.0
    tis_rs = RolloutCorrectionConfig.decoupled_geo_rs_token_tis(is_threshold=1.5, rs_threshold="0.9_1.1")
    assert (tis_rs.rollout_is_threshold, tis_rs.rollout_rs_threshold) == (1.5, "0.9_1.1")
    assert RolloutCorrectionConfig.decoupled_k3_rs(0.05).rollout_rs_threshold == 0.05
    with pytest.raises(TypeError, match="unexpected"):
        RolloutCorrectionConfig.bypass_ppo_clip(threshold=2.0)


def test_params_parse_the_thresholds():
    params = RolloutCorrectionConfig.decoupled_token_icepop().params()
    assert params.is_threshold.is_icepop and (params.is_threshold.lower, params.is_threshold.upper) == (0.5, 5.0)
    with pytest.raises(ValueError, match="rollout_is"):
        RolloutCorrectionConfig(rollout_is="per-token").params()


def test_algo_config_and_reexports():
    algorithm = AlgoConfig(adv_estimator="grpo", kl_ctrl=KLControlConfig(type="adaptive"))
    assert algorithm.adv_estimator == "grpo" and algorithm.kl_ctrl.type == "adaptive"
    assert algorithm.get("gdpo_reward_keys") is None
    assert CheckpointConfig is WorkerCheckpointConfig
