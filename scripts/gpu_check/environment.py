"""Which Python packages hybridrl's GPU paths need, which are missing, and installing those from a wheel folder.

Standard library only: this runs before anything else is known to import. The GPU machine ships PyTorch,
transformers, tokenizers, safetensors, pandas, pyarrow, psutil, cloudpickle, packaging, PyYAML and jinja2; hybridrl
also needs the pure-Python packages of ``CARRIED_DISTRIBUTIONS``, carried in a wheel folder
(``scripts/gpu_check/build_wheels.sh``) and installed with

    python -m pip install --no-index --find-links DIR --no-deps --target <workdir>/site <missing ones>

into a folder of their own (put first on the checks' PYTHONPATH), so the machine's own packages stay untouched.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

# import name -> distribution name, for every third-party package the checks' code paths import
REQUIRED_MODULES: dict[str, str] = {
    "torch": "torch",
    "transformers": "transformers",
    "tokenizers": "tokenizers",
    "safetensors": "safetensors",
    "numpy": "numpy",
    "pandas": "pandas",
    "pyarrow": "pyarrow",
    "psutil": "psutil",
    "cloudpickle": "cloudpickle",
    "packaging": "packaging",
    "yaml": "PyYAML",
    "jinja2": "jinja2",
    "omegaconf": "omegaconf",
    "hydra": "hydra-core",
    "antlr4": "antlr4-python3-runtime",
    "tensordict": "tensordict",
    "pyvers": "pyvers",
    "torchdata": "torchdata",
}

# the distributions the wheel folder carries (pure Python; see build_wheels.sh for the pinned versions)
CARRIED_DISTRIBUTIONS = ("hydra-core", "omegaconf", "antlr4-python3-runtime", "tensordict", "pyvers", "torchdata")


def missing_modules(modules: dict[str, str] = REQUIRED_MODULES) -> dict[str, str]:
    """The entries of ``modules`` (import name -> distribution) that this interpreter cannot find."""
    importlib.invalidate_caches()
    return {name: dist for name, dist in modules.items() if importlib.util.find_spec(name) is None}


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def wheel_distribution(wheel: Path) -> str:
    """The normalised distribution name of a wheel file (``hydra_core-1.3.8-py3-none-any.whl`` -> ``hydra-core``)."""
    return _normalise(wheel.name.split("-")[0])


def wheels_for(distributions: list[str], wheel_dir: Path) -> tuple[list[Path], list[str]]:
    """``(wheel files found for the distributions, distributions with no wheel in the folder)``."""
    by_name = {wheel_distribution(wheel): wheel for wheel in sorted(Path(wheel_dir).glob("*.whl"))}
    found = [by_name[_normalise(d)] for d in distributions if _normalise(d) in by_name]
    absent = [d for d in distributions if _normalise(d) not in by_name]
    return found, absent


def install_command(wheels: list[Path], wheel_dir: Path, target: Path) -> list[str]:
    """pip, offline: only the folder, no dependency resolution (the machine's own torch stays), into ``target``."""
    return [
        sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(wheel_dir), "--no-deps",
        "--no-compile", "--no-cache-dir", "--disable-pip-version-check", "--target", str(target),
        *[str(wheel) for wheel in wheels],
    ]  # fmt: skip


def install_missing(
    wheel_dir: Path, target: Path, modules: dict[str, str] = REQUIRED_MODULES, timeout_s: float = 120.0
) -> dict[str, object]:
    """Install the wheels of the missing ``modules`` (import name -> distribution) from ``wheel_dir`` into ``target``.

    Returns a report: ``missing_before`` (distributions), ``installed`` (wheel file names), ``no_wheel``
    (missing distributions the folder lacks) and ``pip_returncode`` / ``pip_output_tail`` when pip ran.
    Add ``target`` to ``sys.path`` / PYTHONPATH to use the packages.
    """
    missing = sorted(set(missing_modules(modules).values()))
    wheels, absent = wheels_for(missing, wheel_dir)
    report: dict[str, object] = {"wheel_folder": str(wheel_dir), "missing_before": missing, "installed": [],
                                 "no_wheel": absent}  # fmt: skip
    if not wheels:
        return report
    Path(target).mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        install_command(wheels, wheel_dir, target), capture_output=True, text=True, timeout=timeout_s
    )
    report["pip_returncode"] = proc.returncode
    report["pip_output_tail"] = (proc.stdout + proc.stderr)[-800:]
    if proc.returncode == 0:
        report["installed"] = [wheel.name for wheel in wheels]
    return report
