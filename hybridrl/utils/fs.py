"""File-system helpers: verl's ``copy``/``copy_to_local`` cache, race-free mkdir, atomic directory writes.

Remote paths: verl reads ``hdfs://`` through the ``hdfs`` command line; hybridrl runs offline and does
not, so :func:`copy` (and with it :func:`copy_to_local`, :func:`exists`, :func:`makedirs`) raises
``NotImplementedError`` for a remote URI, naming it. Local paths behave as in verl: ``copy_to_local``
returns them unchanged (``file://`` is stripped), ``copy`` copies a file or a folder tree.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

__all__ = [
    "atomic_dir",
    "atomic_write_text",
    "copy",
    "copy_local_path_from_hdfs",
    "copy_to_local",
    "copy_to_shm",
    "exists",
    "get_local_temp_path",
    "is_non_local",
    "local_mkdir_safe",
    "makedirs",
    "md5_encode",
    "replace_dir",
    "replacing_file",
    "verify_copy",
]

_TMP_INFIX = ".tmp-"
_FILE_URI = "file://"
# copy_to_local's record of a cached folder's entries, to detect a partial copy on the next call (verl's name)
_DIRECTORY_RECORD = ".directory_record.txt"
_SHM_CACHE_ROOT = "/dev/shm/verl-cache/"


def is_non_local(path: str) -> bool:
    """True for remote URIs (``hdfs://``, ``s3://``, ...); local paths and ``file://`` URIs are local."""
    return "://" in str(path) and not str(path).startswith(_FILE_URI)


def _remote_unsupported(path: str) -> NotImplementedError:
    return NotImplementedError(
        f"Remote path {path!r} is not supported (hybridrl does not call the hdfs client); "
        "copy it to a local folder and pass that path."
    )


def copy(src: str, dst: str, **kwargs: Any) -> Any:
    """``shutil.copy`` for a file, ``shutil.copytree`` for a folder (kwargs go to them); returns ``dst``."""
    if is_non_local(src) or is_non_local(dst):
        raise _remote_unsupported(src if is_non_local(src) else dst)
    if os.path.isdir(src):
        return shutil.copytree(src, dst, **kwargs)
    return shutil.copy(src, dst, **kwargs)


def exists(path: str, **kwargs: Any) -> bool:
    """``os.path.exists`` (remote URIs: ``NotImplementedError``)."""
    if is_non_local(path):
        raise _remote_unsupported(path)
    return os.path.exists(path)


def makedirs(name: str, mode: int = 0o777, exist_ok: bool = False, **kwargs: Any) -> None:
    """``os.makedirs`` (remote URIs: ``NotImplementedError``)."""
    if is_non_local(name):
        raise _remote_unsupported(name)
    os.makedirs(name, mode=mode, exist_ok=exist_ok)


def md5_encode(path: str) -> str:
    """Hex MD5 of the path string: the cache sub-folder (and lock file) name of a remote path."""
    return hashlib.md5(path.encode()).hexdigest()


def get_local_temp_path(hdfs_path: str, cache_dir: str) -> str:
    """``{cache_dir}/{md5(hdfs_path)}/{basename(hdfs_path)}``; the md5 folder is created."""
    folder = os.path.join(cache_dir, md5_encode(hdfs_path))
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, os.path.basename(hdfs_path))


def _entries(folder: str | os.PathLike) -> set[str]:
    """``dir:<rel>`` / ``file:<rel>`` for everything under ``folder`` except the record file."""
    found = set()
    for root, dirs, files in os.walk(folder):
        found.update(f"dir:{os.path.relpath(os.path.join(root, d), folder)}" for d in dirs)
        found.update(f"file:{os.path.relpath(os.path.join(root, f), folder)}" for f in files if f != _DIRECTORY_RECORD)
    return found


def _record_directory_structure(folder_path: str | os.PathLike) -> str:
    """Write the folder's entry list to ``{folder}/.directory_record.txt``; return that file's path."""
    record_file = os.path.join(folder_path, _DIRECTORY_RECORD)
    entries = _entries(folder_path)
    with open(record_file, "w") as f:
        f.writelines(f"{entry}\n" for entry in sorted(entries))
    return record_file


def _check_directory_structure(folder_path: str | os.PathLike, record_file: str | os.PathLike) -> bool:
    """True if the folder holds exactly the entries of ``record_file`` (False if there is no record)."""
    if not os.path.exists(record_file):
        return False
    with open(record_file) as f:
        recorded = set(f.read().splitlines())
    return _entries(folder_path) == recorded


def verify_copy(src: str, dest: str) -> bool:
    """True if ``dest`` has the same kind (file/folder), file sizes and folder entries as ``src``."""
    if not (os.path.exists(src) and os.path.exists(dest)) or os.path.isfile(src) != os.path.isfile(dest):
        return False
    if os.path.isfile(src):
        return os.path.getsize(src) == os.path.getsize(dest)
    if _entries(src) != _entries(dest):
        return False
    for entry in _entries(src):
        kind, rel = entry.split(":", 1)
        if kind == "file" and os.path.getsize(os.path.join(src, rel)) != os.path.getsize(os.path.join(dest, rel)):
            return False
    return True


def copy_to_shm(src: str) -> str:
    """Copy ``src`` under ``/dev/shm/verl-cache/{md5(abs src)}/`` (kept if already a verified copy)."""
    src_abs = os.path.abspath(os.path.normpath(src))
    folder = os.path.join(_SHM_CACHE_ROOT, hashlib.md5(src_abs.encode("utf-8")).hexdigest())
    os.makedirs(folder, exist_ok=True)
    dest = os.path.join(folder, os.path.basename(src_abs))
    if os.path.exists(dest) and verify_copy(src, dest):
        print(
            f"[WARNING]: The memory model path {dest} already exists. If it is not you want, please clear it and "
            "restart the task."
        )
    elif os.path.isdir(src):
        shutil.copytree(src, dest, symlinks=False, dirs_exist_ok=True)
    else:
        shutil.copy2(src, dest)
    return dest


def copy_to_local(
    src: str,
    cache_dir: str | None = None,
    filelock: str = ".file.lock",
    verbose: bool = False,
    always_recopy: bool = False,
    use_shm: bool = False,
) -> str:
    """A local path for ``src`` (verl's ``copy_to_local``).

    Args:
        src: a local path (returned as is; ``file://`` stripped) or a remote URI (copied once into
            ``cache_dir`` by :func:`copy`, which hybridrl does not support: ``NotImplementedError``).
        cache_dir: cache folder for remote copies (default: the system temp dir).
        filelock: unused, kept for verl's signature (the lock is named after ``md5(src)``).
        verbose: print the copies made.
        always_recopy: replace a cached copy.
        use_shm: then copy the result under ``/dev/shm`` (see :func:`copy_to_shm`).
    """
    local_path = copy_local_path_from_hdfs(src, cache_dir, filelock, verbose, always_recopy)
    return copy_to_shm(local_path) if use_shm else local_path


def _remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.remove(path)


def _fill_cache(src: str, local_path: str, verbose: bool, always_recopy: bool) -> None:
    """Copy ``src`` to ``local_path`` unless a complete copy is there (a folder is checked against its record)."""
    if always_recopy:
        _remove(local_path)
    if os.path.exists(local_path):
        record = os.path.join(local_path, _DIRECTORY_RECORD)
        if not os.path.isdir(local_path) or _check_directory_structure(local_path, record):
            return
        if verbose:
            print(f"Recopy from {src} to {local_path} due to missing files or directories.")
        _remove(local_path)
    elif verbose:
        print(f"Copy from {src} to {local_path}")
    copy(src, local_path)
    if os.path.isdir(local_path):
        _record_directory_structure(local_path)


def copy_local_path_from_hdfs(
    src: str,
    cache_dir: str | None = None,
    filelock: str = ".file.lock",
    verbose: bool = False,
    always_recopy: bool = False,
) -> str:
    """verl's older name of :func:`copy_to_local` (without ``use_shm``)."""
    if not is_non_local(src):
        return src[len(_FILE_URI) :] if str(src).startswith(_FILE_URI) else src
    if src.endswith("/"):
        raise ValueError(f"copy_to_local: remove the trailing '/' of {src!r}")
    from filelock import FileLock  # a dependency of torch

    cache_dir = cache_dir if cache_dir is not None else tempfile.gettempdir()
    os.makedirs(cache_dir, exist_ok=True)
    local_path = get_local_temp_path(src, cache_dir)
    with FileLock(lock_file=os.path.join(cache_dir, md5_encode(src) + ".lock")):
        _fill_cache(src, local_path, verbose, always_recopy)
    return local_path


def local_mkdir_safe(path: str | os.PathLike) -> str:
    """``mkdir -p`` that tolerates several ranks creating the same folder at once. Returns the path."""
    os.makedirs(path, exist_ok=True)
    return str(path)


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


@contextmanager
def replacing_file(path: str | os.PathLike, tmp: str | os.PathLike | None = None) -> Iterator[str]:
    """A temporary path beside ``path``: moved onto ``path`` when the block succeeds, removed when it raises.

    A failed write (a full disk: ``OSError(ENOSPC)``) leaves neither half a ``path`` nor the temporary file.
    """
    tmp = str(tmp or f"{path}{_TMP_INFIX}{uuid.uuid4().hex[:8]}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write a small text file atomically (write a temp file, fsync, ``os.replace``)."""
    with replacing_file(path) as tmp, open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
