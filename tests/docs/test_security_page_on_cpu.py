"""docs/security.md names every config key that imports and runs Python by design (a user pointing one at a file
or a class path runs its code), and how to replay the reliability campaign."""

from __future__ import annotations

from pathlib import Path

SECURITY_PAGE = Path(__file__).resolve().parents[2] / "docs" / "security.md"

# the keys whose value is Python that hybridrl imports: tools' and interactions' class_name come from the files
# the two multi_turn keys point at
CODE_RUNNING_KEYS = (
    "custom_reward_function.path",
    "data.custom_cls.path",
    "multi_turn.function_tool_path",
    "multi_turn.tool_config_path",
    "multi_turn.interaction_config_path",
    "rollout.agent.custom_rollout_function.path",
    "rollout.agent.agent_loop_config_path",
    "trust_remote_code",
)


def test_security_page_lists_every_key_that_runs_code():
    text = SECURITY_PAGE.read_text()
    missing = [key for key in CODE_RUNNING_KEYS if f"`{key}" not in text]
    assert not missing, f"docs/security.md does not name these code-running keys: {missing}"
    for base in ("BaseTool", "BaseInteraction"):  # class paths resolved only to their base class, before construction
        assert f"`{base}`" in text
    assert "bash scripts/test.sh reliability" in text
