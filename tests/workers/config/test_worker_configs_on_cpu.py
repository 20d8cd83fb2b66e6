"""verl 0.9's typed configs at ``hybridrl.workers.config`` / ``hybridrl.trainer.config``: defaults equal to the
shipped YAML (one source of truth), every section of the shipped YAML converts, verl's construction checks."""

import warnings
from dataclasses import MISSING, fields

import pytest
from omegaconf import OmegaConf

import hybridrl.trainer.config as trainer_config
import hybridrl.workers.config as worker_config
from hybridrl.base_config import BaseConfig, field_defaults, yaml_section
from hybridrl.utils.config import omega_conf_to_dataclass
from hybridrl.utils.config_files import load_config

CONFIG_CLASSES = sorted(
    {
        cls
        for module in (worker_config, trainer_config)
        for cls in (getattr(module, name) for name in module.__all__)
        if isinstance(cls, type) and issubclass(cls, BaseConfig)
    },
    key=lambda cls: cls.__name__,
)


# values a class's __post_init__ derives from the YAML's, as verl's does: (class, field) -> why
DERIVED_BY_POST_INIT = {
    ("McoreEngineConfig", "sequence_parallel"): "turned off when tensor_model_parallel_size is 1",
    ("HFModelConfig", "hf_config_path"): "null means the model path",
    ("HFModelConfig", "tokenizer_path"): "null means the model path",
    ("HFModelConfig", "local_path"): "the path, user-expanded",
}


def _mismatches(default, yaml_value, where: str) -> list[str]:
    """Where ``default`` does not hold the YAML value. A nested config object must hold each YAML key it has a
    field for, and every YAML key when it is a leaf class (``extra_keys``): a base class such as
    ``OptimizerConfig`` keeps only its own fields of ``actor.optim``."""
    if yaml_value == "???":  # a value the user must set: a required field
        return [] if default is MISSING else [f"{where}: {default!r} for the YAML's ???"]
    if not isinstance(default, BaseConfig):
        return [] if default == yaml_value else [f"{where}: {default!r} != {yaml_value!r}"]
    names = {item.name for item in fields(default)}
    lost = sorted(set(yaml_value) - names) if type(default)._yaml_extra_keys else []
    found = [f"{where}.{key}: missing" for key in lost]
    for key in sorted(set(yaml_value) & names):
        if (type(default).__name__, key) not in DERIVED_BY_POST_INIT:
            found += _mismatches(getattr(default, key), yaml_value[key], f"{where}.{key}")
    return found


def test_the_public_classes_are_found():
    names = {cls.__name__ for cls in CONFIG_CLASSES}
    assert {"ActorConfig", "FSDPActorConfig", "McoreActorConfig", "PolicyLossConfig", "OptimizerConfig"} <= names
    assert {"FSDPOptimizerConfig", "HFModelConfig", "RolloutConfig", "FSDPEngineConfig", "CriticConfig"} <= names
    assert {"AlgoConfig", "KLControlConfig", "RolloutCorrectionConfig", "CheckpointConfig"} <= names


@pytest.mark.parametrize("cls", CONFIG_CLASSES, ids=lambda cls: cls.__name__)
def test_every_yaml_backed_default_equals_the_yaml(cls):
    config_name, path = cls._yaml_source
    section = yaml_section(path, config_name) or {}
    assert set(cls._yaml_fields) <= set(section)
    defaults = field_defaults(cls)
    wrong = [line for name in sorted(cls._yaml_fields) for line in _mismatches(defaults[name], section[name], name)]
    assert not wrong, f"{cls.__name__}: defaults differ from {config_name}.yaml at {path}: {wrong}"
    # a YAML key the class declares or inherits is YAML-backed, never left to a class-body default
    names = {item.name for item in fields(cls)}
    assert not (names & set(section)) - set(cls._yaml_fields)


@pytest.mark.parametrize(
    "config_name, path, cls",
    [
        ("ppo_trainer", "actor_rollout_ref.actor", worker_config.FSDPActorConfig),
        ("ppo_megatron_trainer", "actor_rollout_ref.actor", worker_config.McoreActorConfig),
        ("ppo_trainer", "critic", worker_config.FSDPCriticConfig),
        ("ppo_megatron_trainer", "critic", worker_config.McoreCriticConfig),
        ("ppo_trainer", "actor_rollout_ref.rollout", worker_config.RolloutConfig),
        ("ppo_trainer", "actor_rollout_ref.model", worker_config.HFModelConfig),
        ("ppo_trainer", "algorithm", trainer_config.AlgoConfig),
    ],
)
def test_each_section_of_the_shipped_yaml_converts(config_name, path, cls):
    tree = load_config(config_name)
    section = OmegaConf.select(tree, path)
    if "ppo_micro_batch_size_per_gpu" in section:
        section.ppo_micro_batch_size_per_gpu = 2  # the YAML leaves it null; verl's checks want one
    for key in [key for key in section if OmegaConf.is_missing(section, key)]:
        section[key] = "hf"  # a value the YAML makes the user give (rollout.name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Megatron's "TP size 1: sequence parallel off"
        config = omega_conf_to_dataclass(section, cls)
    assert type(config) is cls
    plain = OmegaConf.to_container(section, resolve=True)  # interpolations resolved against the whole tree
    derived = {key for owner, key in DERIVED_BY_POST_INIT if owner == cls.__name__}
    wrong = {key: (config[key], value) for key, value in plain.items() if not isinstance(value, dict)}
    wrong = {key: pair for key, pair in wrong.items() if pair[0] != pair[1] and key not in derived}
    assert not wrong, f"{cls.__name__} differs from {config_name}.yaml at {path}: {wrong}"


def test_nested_sections_become_their_config_classes():
    actor = worker_config.FSDPActorConfig(ppo_micro_batch_size_per_gpu=2)
    assert isinstance(actor.optim, worker_config.FSDPOptimizerConfig)
    assert isinstance(actor.policy_loss.rollout_correction, trainer_config.RolloutCorrectionConfig)
    assert actor.engine is actor.fsdp_config and actor.engine.strategy == actor.strategy
    algorithm = trainer_config.AlgoConfig()
    assert isinstance(algorithm.kl_ctrl, trainer_config.KLControlConfig)
    assert isinstance(algorithm.filter_groups, trainer_config.FilterGroupsConfig)


def test_actor_construction_checks():
    with pytest.raises(ValueError, match="You have set both"):
        worker_config.ActorConfig(ppo_micro_batch_size=4, ppo_micro_batch_size_per_gpu=2)
    with pytest.raises(ValueError, match="Please set at least one"):
        worker_config.ActorConfig(ppo_micro_batch_size=None, ppo_micro_batch_size_per_gpu=None)
    worker_config.ActorConfig(use_dynamic_bsz=True)  # dynamic batches need no micro-batch size
    with pytest.raises(ValueError, match="Invalid loss_agg_mode"):
        worker_config.ActorConfig(use_dynamic_bsz=True, loss_agg_mode="token-median")
    with pytest.raises(ValueError, match="router_replay mode"):
        worker_config.RouterReplayConfig(mode="R9")


def test_actor_validate_with_run_sizes():
    actor = worker_config.FSDPActorConfig(
        ppo_mini_batch_size=256, ppo_micro_batch_size=8, ulysses_sequence_parallel_size=1
    )
    with pytest.raises(ValueError, match="train_batch_size"):
        actor.validate(n_gpus=8, train_batch_size=128)
    with pytest.raises(ValueError, match="must be >= n_gpus"):
        actor.validate(n_gpus=16, train_batch_size=512)  # 8 * sp 1 < 16
    actor.validate(n_gpus=8, train_batch_size=512)
    sp = worker_config.FSDPActorConfig(use_dynamic_bsz=True, ulysses_sequence_parallel_size=2)
    assert sp.fsdp_config.ulysses_sequence_parallel_size == 2
    with pytest.raises(ValueError, match="use_remove_padding"):
        sp.validate(n_gpus=8, train_batch_size=256, model_config={"use_remove_padding": False})


def test_batch_sizes_are_mutable_and_the_rest_frozen():
    actor = worker_config.FSDPActorConfig(ppo_micro_batch_size_per_gpu=2)
    actor.ppo_mini_batch_size = 512
    assert actor.ppo_mini_batch_size == 512
    with pytest.raises(AttributeError):
        actor.clip_ratio = 0.5


def test_optimizer_checks_and_aliases():
    assert worker_config.FSDPOptimizerConfig(warmup_style="cosine").lr_scheduler_type == "cosine"
    with pytest.raises(ValueError, match="lr_scheduler_type"):
        worker_config.FSDPOptimizerConfig(warmup_style=None, lr_scheduler_type="linear")
    with pytest.warns(DeprecationWarning, match="grad_clip"):
        assert worker_config.OptimizerConfig(grad_clip=0.5).clip_grad == 0.5


def test_megatron_engine_turns_sequence_parallel_off_at_tp1():
    with pytest.warns(UserWarning, match="TP size is 1"):
        assert (
            worker_config.McoreEngineConfig(tensor_model_parallel_size=1, sequence_parallel=True).sequence_parallel
            is False
        )
    assert (
        worker_config.McoreEngineConfig(tensor_model_parallel_size=2, sequence_parallel=True).sequence_parallel is True
    )
    with pytest.raises(ValueError, match="strategy"):
        worker_config.FSDPEngineConfig(strategy="megatron")


def test_hf_model_config_target_modules_and_paths():
    model = worker_config.HFModelConfig(path="/nonexistent/model", target_modules=["q_proj", "v_proj"])
    assert model.tokenizer_path == model.hf_config_path == "/nonexistent/model"
    assert model.hf_config is None  # not a local folder: nothing loaded
    with pytest.raises(TypeError, match="target_modules"):
        worker_config.HFModelConfig(path="/nonexistent/model", target_modules=[1, 2])


def test_hf_model_config_loads_a_local_folder(tiny_model_dir):
    model = worker_config.HFModelConfig(path=str(tiny_model_dir))
    assert model.hf_config.model_type == "qwen2"
    assert model.tokenizer is not None and model.get_processor() is model.tokenizer
