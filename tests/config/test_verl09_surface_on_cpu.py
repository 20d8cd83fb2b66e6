"""verl 0.9's config surface: the ``model_engine`` group, the keys of capabilities hybridrl lacks (accepted at their
default, refused or warned about otherwise), the aliases of moved settings, and the defaults table of
docs/verl-parity.md checked against the YAML."""

from __future__ import annotations

import ast
import fnmatch
import re
import warnings
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from hybridrl.config import ConfigError, allowed_additions, compose_config, prepare_cli_argv
from hybridrl.config.errors import ConfigWarning
from hybridrl.config.loading import flatten_keys, to_plain
from hybridrl.config.unsupported import READ_AS_IS, UNSUPPORTED, check_unsupported
from hybridrl.trainer.main_ppo import complete_config
from hybridrl.utils.config_aliases import ALIASES
from hybridrl.utils.config_defaults import section_with_defaults, with_defaults
from hybridrl.utils.config_files import load_config

ROOT = Path(__file__).resolve().parents[2]
TRAINERS = ("ppo_trainer", "ppo_megatron_trainer")


def _tsv(version: str, name: str) -> dict[str, object]:
    folder = ROOT / ("tests/fixtures" if version == "0.9" else "tests/configs/reference")
    rows = {}
    for line in (folder / f"verl-{version}-{name}-keys.tsv").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = line.split("\t", 1)
            rows[key] = ast.literal_eval(value)
    return rows


# ---------------------------------------------------------------------------------------------- model_engine
def test_model_engine_megatron_selects_the_megatron_file():
    config = compose_config("ppo_trainer", ["model_engine=megatron", "actor_rollout_ref.rollout.name=hf"])
    assert config.model_engine == "megatron"
    assert config.actor_rollout_ref.actor.strategy == "megatron"
    assert config.actor_rollout_ref.actor.megatron.tensor_model_parallel_size == 1
    assert compose_config("ppo_megatron_trainer", ["model_engine=dp"]).actor_rollout_ref.actor.strategy == "fsdp2"
    # the command line: verl's --config-path=config and .yaml name, then the group, pick the shipped Megatron file
    argv = ["--config-path=config", "--config-name=ppo_trainer.yaml", "model_engine=megatron", "trainer.nnodes=1"]
    assert prepare_cli_argv(argv) == ["--config-name=ppo_megatron_trainer", "model_engine=megatron", "trainer.nnodes=1"]


@pytest.mark.parametrize("engine", ["veomni", "mindspeed", "torchtitan"])
def test_an_engine_hybridrl_lacks_is_refused_by_name(engine):
    with pytest.raises(
        ConfigError, match=rf"model_engine: '{engine}' selects the .* which hybridrl does not implement"
    ):
        compose_config("ppo_trainer", [f"model_engine={engine}"])


def test_plus_on_a_listed_key_sets_it():
    config = compose_config("ppo_trainer", ["+actor_rollout_ref.model.lora.merge=True"])
    assert config.actor_rollout_ref.model.lora.merge is True


# ---------------------------------------------------------------------------------------------- lacked capabilities
def test_lacked_capability_is_accepted_at_its_default_and_refused_otherwise():
    assert check_unsupported(compose_config("ppo_trainer", ["transfer_queue.enable=False"])) == []
    problems = check_unsupported(
        compose_config("ppo_trainer", ["transfer_queue.enable=True", "skip.rollout.enable=True"])
    )
    by_key = {problem.key: problem for problem in problems}
    assert "TransferQueue" in by_key["transfer_queue.enable"].fix
    assert "replaying rollouts" in by_key["skip.rollout.enable"].fix
    assert "not implemented in hybridrl" in str(by_key["transfer_queue.enable"])


def test_a_speed_knob_hybridrl_lacks_warns_and_the_megatron_tree_has_its_own_defaults():
    key = "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes"
    with pytest.warns(ConfigWarning, match="bucket size for the weight transfer"):
        assert check_unsupported(compose_config("ppo_trainer", [f"{key}=512"])) == []
    megatron = with_defaults(compose_config("ppo_megatron_trainer", []))
    # main_ppo runs the Megatron tree resolved: an interpolated default (`${oc.select:...}`) arrives as its value
    resolved = complete_config(compose_config("ppo_megatron_trainer", ["actor_rollout_ref.rollout.name=hf"]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_unsupported(megatron) == []  # every row at the Megatron file's own defaults
        assert check_unsupported(resolved) == []


def test_every_key_verl_09_added_is_refused_aliased_or_read():
    """No verl 0.9 key is silently ignored: each new one is a row of the table, an alias, or read as verl reads it."""
    patterns = [row.key for row in UNSUPPORTED["ppo_trainer"]] + list(READ_AS_IS)
    aliased = {alias.new for alias in ALIASES}
    verl_05 = set(_tsv("0.5", "ppo_trainer")) | set(_tsv("0.5", "ppo_megatron_trainer"))
    uncovered = []
    for name in TRAINERS:
        new = set(_tsv("0.9", name)) - verl_05 - allowed_additions(name)
        for key in sorted(new):
            covered = key in aliased or any(fnmatch.fnmatchcase(key, p) for p in patterns)
            if not covered:
                uncovered.append(f"{name}: {key}")
    assert uncovered == []


# ---------------------------------------------------------------------------------------------- aliases
def test_reward_section_and_sequence_parallel_size_reach_the_keys_hybridrl_reads():
    config = with_defaults(
        compose_config(
            "ppo_trainer",
            ["reward.reward_manager.name=dapo", "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2"],
        )
    )
    assert config.reward_model.reward_manager == "dapo"
    assert config.actor_rollout_ref.actor.ulysses_sequence_parallel_size == 2
    assert config.actor_rollout_ref.ref.ulysses_sequence_parallel_size == 2  # the ref follows the actor, as in verl
    assert config.actor_rollout_ref.actor.optim.warmup_style == "constant"  # from optim.lr_scheduler_type
    # the verl 0.5 spelling wins when set, as verl 0.9's deprecated override
    legacy = with_defaults(
        compose_config("ppo_trainer", ["reward.reward_manager.name=dapo", "reward_model.reward_manager=prime"])
    )
    assert legacy.reward_model.reward_manager == "prime"


def test_a_composed_config_holds_verl_09_values_under_the_keys_hybridrl_reads():
    config = compose_config("ppo_trainer", ["critic.optim.lr_scheduler_type=cosine"])  # not through with_defaults
    assert config.reward_model.reward_manager == "naive"  # reward.reward_manager.name's default
    assert config.actor_rollout_ref.actor.optim.warmup_style == "constant"
    assert config.critic.optim.warmup_style == "cosine"


def test_a_hand_built_section_is_resolved_where_it_enters():
    def optim(**values):
        return section_with_defaults({"actor": {"optim": values}}, "actor_rollout_ref").actor.optim

    assert optim().warmup_style == "constant"
    assert optim(lr_scheduler_type="cosine").warmup_style == "cosine"
    assert optim(lr_scheduler_type="cosine", warmup_style="constant").warmup_style == "constant"  # the 0.5 key wins


# ---------------------------------------------------------------------------------------------- docs table
# the Megatron file keeps sync mode (no Megatron server-mode rollout yet), as docs/verl-parity.md says
MEGATRON_SYNC = {"actor_rollout_ref.rollout.mode"}
_ROW = re.compile(r"^\| `([\w.]+)` \| `(.*)` \| `(.*)` \| .+ \|$")


def _doc_rows(name: str) -> dict[str, tuple[object, object]]:
    """The rows of the table for both files, overlaid for the Megatron file by its own table's."""
    text = (ROOT / "docs/verl-parity.md").read_text()
    section = text[text.index("### Defaults that verl 0.9 changed") :]
    both, megatron_only = section.split("`ppo_megatron_trainer.yaml` only:", 1)
    rows = {}
    for table in (both, megatron_only) if name == "ppo_megatron_trainer" else (both,):
        for line in table.splitlines():
            match = _ROW.match(line)
            if match:
                rows[match.group(1)] = (ast.literal_eval(match.group(2)), ast.literal_eval(match.group(3)))
    return rows


def test_the_defaults_table_of_verl_parity_agrees_with_the_yaml():
    for name in TRAINERS:
        rows = _doc_rows(name)
        v5, v9 = _tsv("0.5", name), _tsv("0.9", name)
        tree = load_config(name)
        if name == "ppo_megatron_trainer":  # filled from ppo_trainer.yaml as the trainer does, aliases not resolved
            tree = OmegaConf.merge(OmegaConf.create(to_plain(load_config("ppo_trainer"))), tree)
        ours = flatten_keys(tree)
        changed = {key for key in v5 if key in v9 and v5[key] != v9[key]}
        assert sorted(changed - set(rows)) == [], f"{name}: changed defaults missing from docs/verl-parity.md"
        for key in changed - MEGATRON_SYNC:
            old, new = rows[key]
            assert str(old) == str(v5[key]) and str(new) == str(v9[key]), key
            assert str(ours[key]) == str(new), f"{name}: the YAML's {key} is {ours[key]!r}, the table says {new!r}"


def test_a_command_line_without_rollout_name_is_told_to_set_it():
    from hybridrl.config.checks_rollout import check_rollout_mode

    problems = check_rollout_mode(compose_config("ppo_trainer", []))
    assert [p.key for p in problems] == ["actor_rollout_ref.rollout.name"]
    assert "rollout.name=hf" in problems[0].fix


def test_a_base_key_given_twice_to_the_megatron_file_takes_the_last_value():
    """``critic.model.use_remove_padding`` is ppo_trainer's, added to the Megatron tree from its base: a command line
    (or a test library) that sets it twice means the last value, as for any key, not Hydra's "already at"."""
    overrides = ["critic.model.use_remove_padding=False", "critic.model.use_remove_padding=True"]
    assert compose_config("ppo_megatron_trainer", overrides).critic.model.use_remove_padding is True
