"""The user-facing text: the docs site builds in strict mode, the README fits on a screen, every page is reachable,
no internal tracker numbers, every ``HYBRIDRL_*`` variable documented.

The site build (``mkdocs build --strict``, a few seconds) fails on a broken link between pages, a missing anchor, a
page left out of ``mkdocs.yml``'s nav and a link to a repository file that does not exist (``scripts/docs/
mkdocs_hooks.py``). The README and the examples' READMEs are outside the site, so their links are checked here.
"""

from __future__ import annotations

import posixpath
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README_MAX_BYTES = 10 * 1024
PERFORMANCE_MAX_BYTES = 15 * 1024
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(?:```|~~~).*?^(?:```|~~~)", re.M | re.S)
# An internal tracker's numbers mean nothing to a user: "issue 22", "issue #5", "#123".
_TRACKER_REF = re.compile(r"\bissues? ?#?\d+|(?<![\w&/#])#\d+\b", re.I)


def _user_facing_files() -> list[Path]:
    """The README, every page under docs/, every README under examples/."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "examples").rglob("README.md"))]


def _links(path: Path) -> list[str]:
    """Relative link targets of a markdown file, code blocks left out."""
    text = _FENCE.sub("", path.read_text())
    return [t for t in _LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def _resolve(source: Path, target: str) -> tuple[Path, str]:
    """(repository path, anchor) that a link of ``source`` names."""
    path, _, anchor = target.partition("#")
    rel = posixpath.normpath(posixpath.join(source.parent.relative_to(REPO).as_posix(), path))
    return REPO / rel, anchor


def _anchors(path: Path) -> set[str]:
    """The heading ids MkDocs (and GitHub, for these headings) gives a markdown file's headings."""
    from markdown.extensions.toc import slugify  # mkdocs' default toc slugify

    text = _FENCE.sub("", path.read_text())
    return {slugify(h.strip(), "-") for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_site_builds_in_strict_mode(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs site needs mkdocs (pip install -e '.[test]')")
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"), "-d", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr[-4000:]
    assert (tmp_path / "index.html").is_file() and (tmp_path / "status.html").is_file()


def test_readme_fits_and_performance_page_stays_short():
    assert (REPO / "README.md").stat().st_size <= README_MAX_BYTES
    assert (REPO / "docs/performance.md").stat().st_size <= PERFORMANCE_MAX_BYTES


def test_links_outside_the_site_resolve():
    """The README's and the examples' links name files that exist, and anchors the target has."""
    broken = []
    for source in [REPO / "README.md", *sorted((REPO / "examples").rglob("README.md"))]:
        for target in _links(source):
            path, anchor = _resolve(source, target)
            if not path.exists():
                broken.append(f"{source.relative_to(REPO)}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{source.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_page_is_reachable_from_the_readme_or_the_docs_index():
    pages = {p for p in _user_facing_files() if p.suffix == ".md"} | set((REPO / "examples").rglob("*.md"))
    seen, todo = set(), [REPO / "README.md", REPO / "docs/index.md"]
    while todo:
        page = todo.pop()
        if page in seen or not page.is_file():
            continue
        seen.add(page)
        for target in _links(page):
            path, _ = _resolve(page, target)
            path = path / "README.md" if path.is_dir() else path
            if path.suffix == ".md":
                todo.append(path)
    unreachable = sorted(str(p.relative_to(REPO)) for p in pages - seen)
    assert not unreachable, f"not linked from README.md or docs/index.md (directly or through a page): {unreachable}"


def test_no_internal_tracker_numbers_in_user_facing_text():
    found = [
        f"{path.relative_to(REPO)}:{number}: {match.group(0)}"
        for path in _user_facing_files()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for match in _TRACKER_REF.finditer(line)
    ]
    assert not found, "\n".join(found)


def _environment_variables() -> set[str]:
    """``HYBRIDRL_*`` names the package reads (as strings) and the shell scripts expand."""
    sources = [path.read_text() for path in (REPO / "hybridrl").rglob("*.py")]
    # module constants named HYBRIDRL_* (exported by name in __all__) are not environment variables
    constants = {name for text in sources for name in re.findall(r"^(HYBRIDRL_[A-Z0-9_]+)\s*=", text, re.M)}
    names = {name for text in sources for name in re.findall(r"[\"'](HYBRIDRL_[A-Z0-9_]+)[\"']", text)} - constants
    for path in [*(REPO / "scripts").rglob("*.sh"), *(REPO / "examples").rglob("*.sh")]:
        names |= set(re.findall(r"\$\{?(HYBRIDRL_[A-Z0-9_]+)", path.read_text()))
    return names


def test_every_environment_variable_is_documented():
    names = _environment_variables()
    assert {"HYBRIDRL_DEVICE", "HYBRIDRL_CPU_ALLOCATOR", "HYBRIDRL_VENV"} <= names  # the scan finds them
    page = (REPO / "docs/development.md").read_text()
    assert not sorted(n for n in names if f"`{n}`" not in page), "add them to docs/development.md"
