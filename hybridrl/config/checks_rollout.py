"""Rollout-mode checks: server mode (``rollout.mode=async``) and multi-turn settings that only work together."""

from __future__ import annotations

import os

from omegaconf import DictConfig

from hybridrl.config.access import ROLLOUT, get
from hybridrl.config.errors import ConfigProblem

ROLLOUT_MODES = ("sync", "async")
TRUNCATE_SIDES = ("left", "middle", "right")
SANITY_CHECK_MODES = ("strict", "ignore_strippable", "disable")


def check_rollout_mode(config: DictConfig) -> list[ConfigProblem]:
    """Problems of ``rollout.mode`` / ``rollout.multi_turn`` / ``rollout.agent`` (each names its key and fix)."""
    problems: list[ConfigProblem] = []
    if get(config, f"{ROLLOUT}.name") is None:  # verl 0.9's mandatory '???': no default engine
        problems.append(ConfigProblem(f"{ROLLOUT}.name", "is required: verl 0.9 has no default rollout engine.",
                                      f"set {ROLLOUT}.name=hf (CPU or GPU), vllm or sglang."))
        return problems
    mode = get(config, f"{ROLLOUT}.mode")
    if mode not in ROLLOUT_MODES:
        problems.append(ConfigProblem(f"{ROLLOUT}.mode", f"{mode!r} is not a rollout mode.", f"use one of {ROLLOUT_MODES}."))
        return problems
    multi_turn = f"{ROLLOUT}.multi_turn"
    if get(config, f"{multi_turn}.enable") and mode != "async":
        problems.append(ConfigProblem(f"{multi_turn}.enable", "multi-turn rollouts run in server mode only.",
                                      f"set {ROLLOUT}.mode=async (and data.return_raw_chat=True)."))
    if mode == "async":
        _check_server_mode(config, problems)
    for key in ("tool_config_path", "function_tool_path", "interaction_config_path"):
        _check_file(config, f"{multi_turn}.{key}", needs=f"{multi_turn}.enable", problems=problems)
    _check_file(config, f"{ROLLOUT}.agent.agent_loop_config_path", needs=None, problems=problems)
    _check_file(config, f"{ROLLOUT}.agent.custom_rollout_function.path", needs=None, problems=problems)
    if get(config, f"{ROLLOUT}.agent.custom_rollout_function.path") and mode != "async":
        problems.append(ConfigProblem(f"{ROLLOUT}.agent.custom_rollout_function.path",
                                      "your agent talks to the rollout servers, which run in server mode only.",
                                      f"set {ROLLOUT}.mode=async (and data.return_raw_chat=True)."))
    _check_choice(config, f"{multi_turn}.tool_response_truncate_side", TRUNCATE_SIDES, problems)
    _check_choice(config, f"{multi_turn}.tokenization_sanity_check_mode", SANITY_CHECK_MODES, problems)
    _check_choice(config, f"{multi_turn}.format", tool_call_formats(), problems)
    return problems


def tool_call_formats() -> tuple[str, ...]:
    """The ``multi_turn.format`` names: exactly the tool-call parsers registered (verl 0.9's registry names)."""
    from hybridrl.generation.tool_parser import ToolParser  # lazy: the parsers' registry is the one list of names

    return tuple(sorted(ToolParser._registry))


def _check_server_mode(config: DictConfig, problems: list[ConfigProblem]) -> None:
    if not get(config, "data.return_raw_chat"):
        problems.append(ConfigProblem("data.return_raw_chat", "server mode builds each prompt from the row's chat "
                                      "messages, which the dataset returns only with return_raw_chat=True.",
                                      "set data.return_raw_chat=True."))
    name, tp = get(config, f"{ROLLOUT}.name"), get(config, f"{ROLLOUT}.tensor_model_parallel_size")
    if name != "hf" and int(tp) > 1:
        problems.append(ConfigProblem(f"{ROLLOUT}.tensor_model_parallel_size",
                                      f"rollout.mode=async with rollout.name={name} serves one replica per rank in "
                                      f"this version (got tensor_model_parallel_size={tp}).",
                                      f"set {ROLLOUT}.tensor_model_parallel_size=1."))
    workers = get(config, f"{ROLLOUT}.agent.num_workers")
    if int(workers) < 1:
        problems.append(ConfigProblem(f"{ROLLOUT}.agent.num_workers", f"{workers} agent-loop workers.",
                                      "set it to 1 or more."))


def _check_file(config: DictConfig, key: str, needs: str | None, problems: list[ConfigProblem]) -> None:
    path = get(config, key)
    if not path:
        return
    if needs is not None and not get(config, needs):
        problems.append(ConfigProblem(key, f"is set but {needs}=False, so it would be ignored.", f"set {needs}=True."))
    if not os.path.isfile(os.path.expanduser(str(path))):
        problems.append(ConfigProblem(key, f"{path!r} is not a file.", "point it at an existing file."))


def _check_choice(config: DictConfig, key: str, choices: tuple[str, ...], problems: list[ConfigProblem]) -> None:
    value = get(config, key)
    if value not in choices:
        problems.append(ConfigProblem(key, f"{value!r} is not one of {choices}.", f"use one of {choices}."))
