"""MkDocs hook: links from a docs page to repository files outside ``docs/``.

The pages link to files a reader opens in the repository (``../examples/quickstart/README.md``,
``../benchmarks/results/…``, ``../hybridrl/…``), so they read the same on GitHub and in a checkout. MkDocs only knows
the files under ``docs/`` and would report each such link as broken. This hook checks each one against the
repository instead (a target that does not exist is a warning, so ``--strict`` fails) and points it at the file
next to the site: a site built into ``<repo>/site`` (the default ``site_dir``) links to ``<repo>/<path>``.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path

log = logging.getLogger("mkdocs.plugins.hybridrl_links")

_LINK = re.compile(r"(\]\()([^)\s]+)(\))")
_FENCE = re.compile(r"^(```|~~~)", re.M)
_MARK = "hybridrl-repo:"


def _outside_target(page_src: str, target: str) -> str | None:
    """The repository path ``target`` names when it leaves docs/ (``None`` for a link MkDocs checks itself)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return None
    path = target.split("#", 1)[0]
    joined = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page_src), path))
    return None if joined.startswith("docs/") or joined == "docs" else joined


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Check every link that leaves docs/ and mark it so MkDocs' own link check passes it by."""
    repo = Path(config.config_file_path).parent
    out, inside = [], False
    for part in _FENCE.split(markdown):  # text and fence markers in turn; links inside a code block stay as written
        if part in ("```", "~~~"):
            inside = not inside
            out.append(part)
        else:
            out.append(part if inside else _LINK.sub(lambda match: _rewrite(match, page, repo), part))
    return "".join(out)


def _rewrite(match: re.Match, page, repo: Path) -> str:
    """The link with a repository target marked for :func:`on_page_content`, or as it was."""
    target = match.group(2)
    path = _outside_target(page.file.src_uri, target)
    if path is None:
        return match.group(0)
    if path.startswith("..") or not (repo / path).exists():
        log.warning(
            "Doc file '%s' links to '%s', which is not in the repository ('%s').", page.file.src_uri, target, path
        )
        return match.group(0)
    anchor = target[len(target.split("#", 1)[0]) :]
    return f"{match.group(1)}{_MARK}{path}{anchor}{match.group(3)}"


def on_page_content(html: str, page, config, files) -> str:
    """Point the marked links at the repository files next to the site (``<repo>/site/<page>.html`` → ``<repo>/…``)."""
    up = "../" * (page.file.dest_uri.count("/") + 1)
    return html.replace(f'href="{_MARK}', f'href="{up}').replace(f'src="{_MARK}', f'src="{up}')
