"""Interactions: BaseInteraction defaults, Gsm8kInteraction (verl's example), the YAML registry."""

import asyncio
import os

import pytest

from hybridrl.interactions.base import BaseInteraction
from hybridrl.interactions.gsm8k_interaction import CORRECT_RESPONSE, RETRY_RESPONSE, Gsm8kInteraction
from hybridrl.interactions.utils.interaction_registry import (
    default_interaction_name,
    initialize_interactions_from_config,
)

SHIPPED = os.path.join(
    os.path.dirname(__file__), "..", "..", "examples", "sglang_multiturn", "config", "interaction_config",
    "gsm8k_interaction_config.yaml",
)  # fmt: skip


def run(coroutine):
    return asyncio.run(coroutine)


def test_base_interaction_defaults():
    interaction = BaseInteraction({})
    assert interaction.name == "interaction_agent"
    assert run(interaction.start_interaction("c")) == "c" and len(run(interaction.start_interaction())) == 36
    assert run(interaction.generate_response("c", [])) == (False, "Your current result seems acceptable.", 0.8, {})
    assert run(interaction.calculate_score()) == 0.0 and run(interaction.finalize_interaction()) is None


def test_gsm8k_interaction_turns():
    interaction = Gsm8kInteraction({"name": "gsm8k"})
    instance_id = run(interaction.start_interaction("c", ground_truth="72", query="q"))
    wrong = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "I think 70"}]
    # strict mode: no "#### n" → score 0, ask again
    assert run(interaction.generate_response(instance_id, wrong)) == (False, RETRY_RESPONSE, 0, {})
    right = [*wrong, {"role": "user", "content": RETRY_RESPONSE}, {"role": "assistant", "content": "So #### 72"}]
    assert run(interaction.generate_response(instance_id, right)) == (True, CORRECT_RESPONSE, 1.0, {})
    assert run(interaction.calculate_score(instance_id)) == 1.0
    run(interaction.finalize_interaction(instance_id))
    assert interaction._instance_dict == {}


def test_shipped_config():
    interactions = initialize_interactions_from_config(SHIPPED)
    assert list(interactions) == ["gsm8k"]
    assert isinstance(interactions["gsm8k"], Gsm8kInteraction) and interactions["gsm8k"].config == {"name": "gsm8k"}


def test_verl_paths_and_default_names(tmp_path):
    path = tmp_path / "interactions.yaml"
    path.write_text(
        "interaction:\n"
        "  - class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction\n"
        "  - name: polite\n    class_name: hybridrl.interactions.base.BaseInteraction\n    config: {tone: kind}\n"
    )
    interactions = initialize_interactions_from_config(str(path))
    assert list(interactions) == ["gsm8k", "polite"]
    assert (
        interactions["polite"].config == {"tone": "kind", "name": "polite"} and interactions["polite"].name == "polite"
    )
    assert default_interaction_name("pkg.MyUser") == "myuser"


@pytest.mark.parametrize(
    "text, match",
    [
        ("interaction:\n  - class_name: hybridrl.interactions.base.BaseInteraction\n"
         "  - class_name: hybridrl.interactions.base.BaseInteraction\n", r"interaction\[1\] .*duplicate interaction name 'base'"),
        ("tools: []\n", "needs a top-level `interaction:` list"),
        ("interaction:\n  - name: x\n", r"interaction\[0\] .*needs `class_name`"),
        # a class of another kind is refused before it is constructed with the entry's config
        ("interaction:\n  - class_name: hybridrl.tools.calculator_tool.CalculatorTool\n",
         r"interaction\[0\] .*is not a BaseInteraction: derive it from hybridrl.interactions.base.BaseInteraction"),
    ],
)  # fmt: skip
def test_bad_files_name_file_and_entry(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as info:
        initialize_interactions_from_config(str(path))
    assert str(path) in str(info.value)


def test_missing_module_raises_module_not_found_naming_file_and_fix(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("interaction:\n  - class_name: verl.interactions.weather_interaction.WeatherInteraction\n")
    with pytest.raises(ModuleNotFoundError, match="hybridrl does not provide that verl module") as info:
        initialize_interactions_from_config(str(path))  # verl raises ModuleNotFoundError here too
    assert str(path) in str(info.value) and "interaction[0]" in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="interaction_config_path"):
        initialize_interactions_from_config(str(tmp_path / "absent.yaml"))
