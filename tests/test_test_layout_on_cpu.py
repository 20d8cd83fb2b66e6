"""Every test file says where it runs (tests/README.md), and ``bash scripts/test.sh`` runs it there.

- its name ends ``_on_cpu.py`` (needs no GPU) or ``_on_gpu.py`` (needs a CUDA GPU);
- an ``_on_gpu.py`` file carries the ``gpu`` marker, an ``_on_cpu.py`` file never does (nor a CUDA skip);
- a test that needs vLLM carries the ``vllm`` marker (test.sh's vLLM stage runs every file using it, all in
  one pytest process, and fails if one of them ran no test);
- a test that needs megatron-core lies under tests/megatron, whose conftest marks it ``megatron``
  (the Megatron stage runs that folder); nothing outside it is marked ``megatron``.

Markers are read from the source (``pytest.mark.<name>`` / ``mark.<name>`` anywhere in the file: decorators,
``pytestmark``, ``pytest.param(..., marks=...)``), so nothing is imported.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from marked_files import collected_test_files, files_marked, files_without_tests, markers

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
TEST_SH = ROOT / "scripts" / "test.sh"
MEGATRON_DIR = TESTS / "megatron"
PLACE_SUFFIXES = ("_on_cpu.py", "_on_gpu.py")

# A test skipped unless CUDA is there is a GPU test, whatever its marker says.
CUDA_SKIP = re.compile(r"skipif\(\s*not\s+torch\.cuda\.is_available\(\)")


def _needs(package: str) -> re.Pattern[str]:
    """A test that skips without ``package``: ``importorskip("package")`` or ``skipif(find_spec("package") ...``."""
    name = rf"[\"']{package}[\"'.]"
    return re.compile(rf"importorskip\(\s*{name}|skipif\(\s*(?:importlib\.util\.)?find_spec\(\s*{name}")


NEEDS_VLLM = _needs("vllm")
NEEDS_MEGATRON = _needs("megatron")
# scripts/test.sh's vLLM stage runs every file this lists (the markers read from the source, as here), then checks
# that each of them ran a test
VLLM_SELECTION = "tests/marked_files.py vllm"
VLLM_RAN_CHECK = "tests/marked_files.py --check-junit"


def imports_top_level(source: str, package: str) -> bool:
    """Whether the file imports ``package`` (or a submodule of it) anywhere."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] == package for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == package:
            return True
    return False


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def layout_problems(files: list[Path]) -> list[str]:
    """Every break of the scheme in ``files``, one line each (empty when all is in order)."""
    problems = []
    for path in files:
        if path == Path(__file__).resolve():
            continue  # this file's strings hold examples of every break
        source = path.read_text()
        marks = markers(source)
        name = _rel(path)
        if not path.name.endswith(PLACE_SUFFIXES):
            problems.append(f"{name}: a test file name ends _on_cpu.py (no GPU needed) or _on_gpu.py (CUDA only)")
        if path.name.endswith("_on_cpu.py") and ("gpu" in marks or CUDA_SKIP.search(source)):
            problems.append(f"{name}: a GPU-only test in an _on_cpu.py file: move it to an _on_gpu.py file")
        if path.name.endswith("_on_gpu.py") and "gpu" not in marks:
            problems.append(f"{name}: an _on_gpu.py file carries the gpu marker (pytestmark = pytest.mark.gpu)")
        if NEEDS_VLLM.search(source) and "vllm" not in marks:
            problems.append(f"{name}: needs vllm but has no vllm marker, so the vLLM stage (.venv-vllm) never runs it")
        in_megatron = MEGATRON_DIR in path.parents
        needs_megatron = imports_top_level(source, "megatron") or NEEDS_MEGATRON.search(source)
        if not in_megatron and (needs_megatron or "megatron" in marks):
            problems.append(f"{name}: a Megatron test lives under tests/megatron (the Megatron stage runs only it)")
    return problems


def test_every_test_file_says_where_it_runs_and_test_sh_runs_it_there():
    files = collected_test_files()
    assert len(files) > 200  # the walk found the suite
    problems = layout_problems(files)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "name,source,expected",
    [
        ("test_a.py", "def test_x(): pass\n", "ends _on_cpu.py"),
        ("test_a_on_cpu.py", "import pytest\n@pytest.mark.gpu\ndef test_x(): pass\n", "GPU-only test"),
        (
            "test_a_on_cpu.py",
            "import pytest, torch\n@pytest.mark.skipif(not torch.cuda.is_available(), reason='')\ndef test_x(): pass\n",
            "GPU-only test",
        ),
        ("test_a_on_gpu.py", "def test_x(): pass\n", "carries the gpu marker"),
        ("test_a_on_cpu.py", "import pytest\nvllm = pytest.importorskip('vllm')\n", "no vllm marker"),
        (
            "test_a_on_cpu.py",
            "import importlib, pytest\npytestmark = pytest.mark.skipif(importlib.util.find_spec('vllm') is None, reason='')\n",
            "no vllm marker",
        ),
        ("test_a_on_cpu.py", "from megatron.core import parallel_state\n", "under tests/megatron"),
        ("test_a_on_cpu.py", "from pytest import mark\npytestmark = mark.megatron\n", "under tests/megatron"),
    ],
)
def test_the_check_catches_each_break(tmp_path, monkeypatch, name, source, expected):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    monkeypatch.setattr(f"{__name__}.MEGATRON_DIR", tmp_path / "tests" / "megatron")
    path = tmp_path / "tests" / "utils" / name
    path.parent.mkdir(parents=True)
    path.write_text(source)
    problems = layout_problems([path])
    assert len(problems) == 1 and expected in problems[0], problems


def test_the_check_accepts_the_scheme(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    monkeypatch.setattr(f"{__name__}.MEGATRON_DIR", tmp_path / "tests" / "megatron")
    files = {
        "tests/utils/test_a_on_cpu.py": "def test_x(): pass\n",
        "tests/utils/test_b_on_gpu.py": "import pytest\npytestmark = pytest.mark.gpu\n",
        "tests/workers/test_c_on_cpu.py": "import pytest\nvllm = pytest.importorskip('vllm')\npytestmark = pytest.mark.vllm\n",
        "tests/megatron/test_d_on_cpu.py": "from megatron.core import parallel_state\n",
    }
    paths = []
    for rel, source in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        paths.append(path)
    assert layout_problems(paths) == []


def test_test_sh_runs_every_vllm_marked_file_and_checks_each_ran_a_test():
    assert VLLM_SELECTION in TEST_SH.read_text() and VLLM_RAN_CHECK in TEST_SH.read_text()


def test_a_file_with_no_test_case_in_the_junit_report_is_reported(tmp_path):
    report = tmp_path / "report.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.serving.test_a_on_cpu" name="test_x" />'
        '<testcase classname="tests.trainer.test_b_on_cpu.TestGroup" name="test_y"><skipped /></testcase>'
        "</testsuite></testsuites>"
    )
    files = ["tests/serving/test_a_on_cpu.py", "tests/trainer/test_b_on_cpu.py", "tests/trainer/test_b_on_cpu_more.py"]
    assert files_without_tests(str(report), files) == ["tests/trainer/test_b_on_cpu_more.py"]


def test_a_marker_named_in_a_string_does_not_mark_the_file(tmp_path):
    (tmp_path / "test_real_on_cpu.py").write_text("import pytest\npytestmark = [pytest.mark.vllm, pytest.mark.slow]\n")
    (tmp_path / "test_param_on_cpu.py").write_text(
        "import pytest\n@pytest.mark.parametrize('e', [pytest.param('v', marks=pytest.mark.vllm)])\ndef test_x(e): pass\n"
    )
    (tmp_path / "test_string_on_cpu.py").write_text("SOURCE = 'import pytest\\npytestmark = pytest.mark.vllm\\n'\n")
    assert [path.name for path in files_marked("vllm", tmp_path)] == ["test_param_on_cpu.py", "test_real_on_cpu.py"]


def test_this_file_is_not_vllm_marked():
    assert Path(__file__).resolve() not in files_marked("vllm")


def test_test_file_names_are_unique():
    """The suite has no ``__init__.py`` files, so pytest imports test files by basename: two files with the same
    name in different folders stop the whole run at collection ("import file mismatch")."""
    by_name: dict[str, list[str]] = {}
    for path in collected_test_files():
        by_name.setdefault(Path(path).name, []).append(str(Path(path).relative_to(ROOT)))
    assert not {name: paths for name, paths in by_name.items() if len(paths) > 1}
