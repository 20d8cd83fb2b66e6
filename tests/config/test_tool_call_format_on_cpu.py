"""``actor_rollout_ref.rollout.multi_turn.format``: the config accepts exactly the registered tool-call parsers
(verl 0.9's registry names) and names them all when refusing another value."""

from __future__ import annotations

import pytest

from hybridrl.config import collect_problems, compose_config
from hybridrl.config.checks_rollout import check_rollout_mode, tool_call_formats
from hybridrl.generation.tool_parser import ToolParser

KEY = "actor_rollout_ref.rollout.multi_turn.format"
# verl v0.9.0's ToolParser registry (verl/experimental/agent_loop/tool_parser.py, its @ToolParser.register names).
VERL_09_FORMATS = {"hermes", "gpt-oss", "qwen3_coder", "glm", "seed", "minimax", "kimi", "deepseek_v4", "gemma4"}


@pytest.fixture(scope="module")
def composed():
    # rollout.name is mandatory (verl 0.9); other keys' problems are filtered out below
    return compose_config("ppo_trainer", ["actor_rollout_ref.rollout.name=hf"])


def _format_problems(composed, value, check=check_rollout_mode):
    config = composed.copy()  # composing is the slow part: compose once, set the format per case
    config.actor_rollout_ref.rollout.multi_turn.format = value
    return [p for p in check(config) if p.key == KEY]


def test_the_formats_are_verl_09s_registry_names():
    assert set(tool_call_formats()) >= VERL_09_FORMATS
    assert tool_call_formats() == tuple(sorted(ToolParser._registry))  # the registry is the one list


@pytest.mark.parametrize("name", sorted(VERL_09_FORMATS))
def test_each_registered_format_is_accepted(composed, name):
    assert _format_problems(composed, name) == []


def test_an_unknown_format_is_refused_naming_every_format(composed):
    validate = lambda config: collect_problems(config, check_env=False)  # noqa: E731  (the check is wired in)
    [problem] = _format_problems(composed, "qwen3_xml", validate)  # vLLM's name for qwen3_coder
    assert "'qwen3_xml' is not one of" in problem.message
    assert all(f"'{name}'" in problem.fix for name in VERL_09_FORMATS)
