"""MoE config checks: routing replay needs a recording rollout (hf, sync) and the FSDP actor; R2 is refused."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from hybridrl.config.checks_moe import check_moe


def _config(mode="disabled", record=False, name="hf", rollout_mode="sync", strategy="fsdp2", aux=False):
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "actor": {"strategy": strategy, "use_router_aux_loss": aux, "router_replay": {"mode": mode}},
                "ref": {"router_replay": {"mode": "disabled"}},
                "rollout": {"name": name, "mode": rollout_mode, "enable_rollout_routing_replay": record},
            }
        }
    )


def _keys(config) -> list[str]:
    return [problem.key for problem in check_moe(config)]


def test_defaults_and_r3_with_the_hf_rollout_pass():
    assert check_moe(_config()) == []
    assert check_moe(_config(mode="R3", record=True)) == []
    assert check_moe(_config(aux=True)) == []
    # a config without the keys at all (verl 0.5 style) passes
    assert check_moe(OmegaConf.create({"actor_rollout_ref": {"actor": {}, "rollout": {"name": "vllm"}}})) == []


def test_r3_without_recording_names_the_rollout_switch():
    problems = check_moe(_config(mode="R3"))
    assert [p.key for p in problems] == ["actor_rollout_ref.actor.router_replay.mode"]
    assert "enable_rollout_routing_replay=True" in problems[0].fix


@pytest.mark.parametrize("mode", ["R2", "record"])
def test_r2_and_unknown_modes_are_refused(mode):
    assert _keys(_config(mode=mode)) == ["actor_rollout_ref.actor.router_replay.mode"]


@pytest.mark.parametrize(("name", "rollout_mode"), [("vllm", "sync"), ("sglang", "async"), ("hf", "async")])
def test_recording_needs_the_sync_hf_rollout(name, rollout_mode):
    problems = check_moe(_config(mode="R3", record=True, name=name, rollout_mode=rollout_mode))
    assert [p.key for p in problems] == ["actor_rollout_ref.rollout.enable_rollout_routing_replay"]
    assert ("enable_return_routed_experts" in problems[0].message) == (name != "hf")


def test_megatron_actor_is_refused():
    assert _keys(_config(aux=True, strategy="megatron")) == ["actor_rollout_ref.actor.use_router_aux_loss"]


def test_replay_with_ulysses_is_refused():
    config = _config(mode="R3", record=True)
    config.actor_rollout_ref.actor.ulysses_sequence_parallel_size = 2
    assert _keys(config) == ["actor_rollout_ref.actor.ulysses_sequence_parallel_size"]
