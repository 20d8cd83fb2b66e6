"""Where the YAML config tree lives, from a source checkout or from an installed wheel."""

from __future__ import annotations

from pathlib import Path

CONFIG_NAMES = ("ppo_trainer", "sft_trainer", "generation", "evaluation")
ADDITIONS_FILE = "additions_allowlist.txt"


def config_dir() -> Path:
    """Return the folder holding ``ppo_trainer.yaml`` and its siblings.

    An installed wheel carries the YAMLs as ``hybridrl/configs/``; a source checkout has them in the
    top-level ``configs/`` folder, reachable as ``hybridrl/configs`` through a symlink (and directly,
    as a fallback where symlinks were not checked out).
    """
    package_root = Path(__file__).resolve().parents[2]  # .../hybridrl
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
    """Path of ``<name>.yaml`` in :func:`config_dir`; ``name`` is one of :data:`CONFIG_NAMES`."""
    path = config_dir() / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"no config named {name!r} in {config_dir()} (known: {', '.join(CONFIG_NAMES)})")
    return path
