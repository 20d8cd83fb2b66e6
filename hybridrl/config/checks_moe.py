"""Mixture-of-experts checks: routing replay and the router aux loss need an actor and a rollout that can do them.

Rollout routing replay (R3) records each token's experts in the rollout and replays them in the FSDP actor. The hf
engines record in sync mode (``hybridrl.workers.rollout.routing_record``). vLLM (from 0.22, its
``enable_return_routed_experts``) and SGLang expose routing, but hybridrl's vLLM and SGLang rollouts do not pass it
through, and the async hf server does not record. A dense model is refused when the actor is built (its config is
not read here).
"""

from __future__ import annotations

from omegaconf import DictConfig

from hybridrl.config.access import ACTOR, REF, ROLLOUT, get
from hybridrl.config.errors import ConfigProblem

REPLAY_MODES = ("disabled", "R2", "R3")
RECORDING_ENGINES = ("hf", "hf_generate")


def check_moe(config: DictConfig) -> list[ConfigProblem]:
    """Problems of ``router_replay.mode``, ``rollout.enable_rollout_routing_replay`` and ``use_router_aux_loss``."""
    problems: list[ConfigProblem] = []
    recording = bool(get(config, f"{ROLLOUT}.enable_rollout_routing_replay"))
    for section in (ACTOR, REF):
        key = f"{section}.router_replay.mode"
        mode = get(config, key) or "disabled"
        if mode not in REPLAY_MODES:
            problems.append(ConfigProblem(key, f"{mode!r} is not a router replay mode.", f"use one of {REPLAY_MODES}."))
        elif mode == "R2":
            problems.append(
                ConfigProblem(
                    key,
                    "R2 (replaying the old-log-prob forward's routing) is not in hybridrl.",
                    f"use R3 with {ROLLOUT}.enable_rollout_routing_replay=True, or disabled.",
                )
            )
        elif mode == "R3" and not recording:
            problems.append(
                ConfigProblem(
                    key,
                    "R3 replays the rollout's routing, which the rollout does not record.",
                    f"set {ROLLOUT}.enable_rollout_routing_replay=True.",
                )
            )
    if recording:
        _check_recording_engine(config, problems)
    sp_key = f"{ACTOR}.ulysses_sequence_parallel_size"
    if get(config, f"{ACTOR}.router_replay.mode") == "R3" and (get(config, sp_key) or 1) > 1:
        problems.append(
            ConfigProblem(
                sp_key,
                "routing replay maps the record onto whole sequences, not Ulysses slices.",
                f"set {sp_key}=1, or {ACTOR}.router_replay.mode=disabled.",
            )
        )
    fsdp_only = [
        key
        for key in (f"{ACTOR}.use_router_aux_loss", f"{ACTOR}.router_replay.mode")
        if get(config, key) not in (None, False, "disabled")
    ]
    if fsdp_only and get(config, f"{ACTOR}.strategy") == "megatron":
        problems.append(
            ConfigProblem(
                fsdp_only[0],
                "the router aux loss and routing replay run in the FSDP actor.",
                f"use {ACTOR}.strategy=fsdp2 (or fsdp), or turn it off.",
            )
        )
    return problems


def _check_recording_engine(config: DictConfig, problems: list[ConfigProblem]) -> None:
    key = f"{ROLLOUT}.enable_rollout_routing_replay"
    name = get(config, f"{ROLLOUT}.name")
    if name not in RECORDING_ENGINES:
        problems.append(
            ConfigProblem(
                key,
                f"rollout.name={name!r} does not record MoE routing in hybridrl (vLLM >= 0.22 and SGLang expose it as "
                "enable_return_routed_experts; hybridrl's rollouts for them do not pass it through).",
                f"use {ROLLOUT}.name=hf, or set {key}=False.",
            )
        )
    elif get(config, f"{ROLLOUT}.mode") == "async":
        problems.append(
            ConfigProblem(
                key, "the async hf server does not record MoE routing.", f"set {ROLLOUT}.mode=sync, or set {key}=False."
            )
        )
