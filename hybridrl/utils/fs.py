"""File-system helpers: local paths, race-free mkdir, atomic directory writes."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_TMP_INFIX = ".tmp-"


def is_non_local(path: str) -> bool:
    """True for remote URIs (``hdfs://``, ``s3://``, ...), which hybridrl does not read directly."""
    return "://" in str(path) and not str(path).startswith("file://")


def local_mkdir_safe(path: str | os.PathLike) -> str:
    """``mkdir -p`` that tolerates several ranks creating the same folder at once. Returns the path."""
    os.makedirs(path, exist_ok=True)
    return str(path)


def copy_to_local(src: str, cache_dir: str | None = None, **_: object) -> str:
    """Return a local path for ``src`` (verl's ``copy_to_local``).

    Local paths (and ``file://`` URIs) are returned as they are. Remote URIs are not supported
    here: download the model first and pass its local folder.
    """
    if str(src).startswith("file://"):
        return str(src)[len("file://") :]
    if is_non_local(src):
        raise NotImplementedError(
            f"Remote path {src!r} is not supported; copy it to a local folder and pass that path."
        )
    return str(src)


def temp_sibling(path: str | os.PathLike) -> Path:
    """A fresh, unique temp folder next to ``path`` (same file system, so ``rename`` is atomic)."""
    target = Path(path)
    return target.parent / f"{target.name}{_TMP_INFIX}{uuid.uuid4().hex[:8]}"


def is_temp_dir(path: str | os.PathLike) -> bool:
    """True for folders created by :func:`temp_sibling` (partial writes that a crash left behind)."""
    return _TMP_INFIX in Path(path).name


def replace_dir(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Move folder ``src`` to ``dst``, replacing an existing ``dst``.

    ``os.rename`` of a folder is atomic; an existing ``dst`` is first renamed aside and deleted
    after, so at every instant either the old or the new ``dst`` is complete.
    """
    dst = Path(dst)
    old = None
    if dst.exists():
        old = temp_sibling(dst)
        os.rename(dst, old)
    os.rename(src, dst)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Write a folder atomically: yield a temp sibling, rename it to ``path`` on success.

    On an exception the temp folder is removed and ``path`` is left as it was.
    """
    tmp = temp_sibling(path)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_dir(tmp, path)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write a small text file atomically (write a temp file, fsync, ``os.replace``)."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}{_TMP_INFIX}{uuid.uuid4().hex[:8]}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
