"""The YAML tree ships in the wheel and is found (and runs --cfg job) from outside the repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _copy_sources(tmp_path: Path) -> Path:
    """A copy of what the build needs, so the checkout gets no build/ or egg-info folders."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        if (REPO / name).is_file():
            shutil.copy(REPO / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "configs", source / "configs", ignore=ignore)
    shutil.copytree(REPO / "hybridrl", source / "hybridrl", symlinks=True, ignore=ignore)
    return source


def _build_wheel(source: Path, out: Path) -> Path:
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(out),
        str(source),
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    (wheel,) = out.glob("hybridrl-*.whl")
    return wheel


def test_wheel_carries_configs_and_config_dir_finds_them(tmp_path):
    wheel = _build_wheel(_copy_sources(tmp_path), tmp_path / "wh")
    names = zipfile.ZipFile(wheel).namelist()
    for name in ("ppo_trainer", "sft_trainer", "generation", "evaluation"):
        assert f"hybridrl/configs/{name}.yaml" in names
    assert "hybridrl/configs/additions_allowlist.txt" in names

    site = tmp_path / "site"  # a real (non-editable) pip install of the wheel, not an unzip
    install = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--no-index",
        "--target",
        str(site),
        str(wheel),
    ]
    subprocess.run(install, check=True, capture_output=True, timeout=300)
    assert any(site.glob("hybridrl-*.dist-info"))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}  # before the editable checkout on sys.path
    probe = "import hybridrl.config as c; print(c.config_dir()); print(c.__file__)"
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=outside, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    config_dir, module_file = result.stdout.split()
    assert Path(config_dir) == site / "hybridrl" / "configs"
    assert Path(module_file).is_relative_to(site)

    cfg_job = [sys.executable, "-m", "hybridrl.trainer.main_ppo", "--cfg", "job"]
    result = subprocess.run(cfg_job, cwd=outside, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "ppo_mini_batch_size: 256" in result.stdout


def test_wheel_built_from_the_sdist_carries_configs(tmp_path):
    """`python -m build` makes the wheel from the sdist: the configs must survive that route too."""
    source = _copy_sources(tmp_path)
    sdist_dir = tmp_path / "sdist"
    build = f"from setuptools import build_meta; print(build_meta.build_sdist({str(sdist_dir)!r}))"
    subprocess.run([sys.executable, "-c", build], cwd=source, check=True, capture_output=True, timeout=300)
    (sdist,) = sdist_dir.glob("hybridrl-*.tar.gz")
    shutil.unpack_archive(sdist, tmp_path / "unpacked")
    (unpacked,) = (tmp_path / "unpacked").iterdir()
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(tmp_path / "wh2"),
        str(unpacked),
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "wh2").glob("hybridrl-*.whl")
    assert "hybridrl/configs/ppo_trainer.yaml" in zipfile.ZipFile(wheel).namelist()
