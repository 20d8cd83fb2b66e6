"""The shipped YAML config files: where they live (source checkout or installed wheel) and reading one.

The config system (composing, validating, the batch plan) is :mod:`hybridrl.config`; reading the shipped
defaults sits here, on the ground floor, because the public constructors in ``utils`` (``RLHFDataset``,
``SFTDataset``) fill a partial config from them too (:mod:`hybridrl.utils.config_defaults`).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

__all__ = [
    "ADDITIONS_FILE",
    "CONFIG_NAMES",
    "HYBRIDRL_CONFIG_NAMES",
    "config_dir",
    "config_file",
    "load_config",
]

# The YAMLs mirroring verl 0.5's (their keys are frozen against verl's, tests/configs/reference/).
CONFIG_NAMES = ("ppo_trainer", "ppo_megatron_trainer", "sft_trainer", "generation", "evaluation")
# hybridrl-only YAMLs (no verl counterpart): every key is listed in additions_allowlist.txt.
HYBRIDRL_CONFIG_NAMES = ("serve",)
ADDITIONS_FILE = "additions_allowlist.txt"


def config_dir() -> Path:
    """Return the folder holding ``ppo_trainer.yaml`` and its siblings.

    An installed wheel carries the YAMLs as ``hybridrl/configs/``; a source checkout has them in the
    top-level ``configs/`` folder, reachable as ``hybridrl/configs`` through a symlink (and directly,
    as a fallback where symlinks were not checked out).
    """
    package_root = Path(__file__).resolve().parents[1]  # .../hybridrl
    candidates = (package_root / "configs", package_root.parent / "configs")
    for folder in candidates:
        if (folder / "ppo_trainer.yaml").is_file():
            return folder.resolve()
    searched = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(
        f"hybridrl config folder not found (looked for ppo_trainer.yaml in {searched}). "
        "Reinstall hybridrl (`pip install .`) so the wheel carries hybridrl/configs/."
    )


def config_file(name: str) -> Path:
    """Path of ``<name>.yaml`` in :func:`config_dir`; ``name`` is one of :data:`CONFIG_NAMES` or
    :data:`HYBRIDRL_CONFIG_NAMES`."""
    path = config_dir() / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(CONFIG_NAMES + HYBRIDRL_CONFIG_NAMES)
        raise FileNotFoundError(f"no config named {name!r} in {config_dir()} (known: {known})")
    return path


def load_config(name: str = "ppo_trainer") -> DictConfig:
    """The default tree of ``configs/<name>.yaml`` (struct mode, interpolations unresolved)."""
    config = OmegaConf.load(config_file(name))
    assert isinstance(config, DictConfig)
    OmegaConf.set_struct(config, True)
    return config
