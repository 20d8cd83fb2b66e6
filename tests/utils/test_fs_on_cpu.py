"""hybridrl.utils.fs: verl's copy / copy_to_local cache behaviour (remote copies faked: hybridrl is offline)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import hybridrl.utils.fs as fs

REMOTE = "hdfs://namenode/models/file.txt"


def test_local_paths_are_returned_and_remote_ones_name_the_fix(tmp_path):
    assert fs.copy_to_local(str(tmp_path)) == str(tmp_path)
    assert fs.copy_to_local(f"file://{tmp_path}", cache_dir=str(tmp_path / "unused")) == str(tmp_path)
    assert not (tmp_path / "unused").exists()
    assert fs.is_non_local(REMOTE) and not fs.is_non_local("/a/b") and not fs.is_non_local("file:///a")
    with pytest.raises(NotImplementedError, match=r"hdfs://namenode/models/file\.txt.*local folder"):
        fs.copy_to_local(REMOTE, cache_dir=str(tmp_path))
    for call in (lambda: fs.copy(REMOTE, str(tmp_path)), lambda: fs.exists(REMOTE), lambda: fs.makedirs(REMOTE)):
        with pytest.raises(NotImplementedError, match="hdfs client"):
            call()


def test_copy_copies_files_and_trees(tmp_path):
    (tmp_path / "src" / "sub").mkdir(parents=True)
    (tmp_path / "src" / "sub" / "w.bin").write_bytes(b"123")
    fs.copy(str(tmp_path / "src"), str(tmp_path / "dst"))
    assert (tmp_path / "dst" / "sub" / "w.bin").read_bytes() == b"123"
    fs.copy(str(tmp_path / "src" / "sub" / "w.bin"), str(tmp_path / "one.bin"))
    assert (tmp_path / "one.bin").read_bytes() == b"123"
    assert fs.verify_copy(str(tmp_path / "src"), str(tmp_path / "dst"))
    (tmp_path / "dst" / "extra").write_text("x")
    assert not fs.verify_copy(str(tmp_path / "src"), str(tmp_path / "dst"))


def test_md5_and_local_temp_path(tmp_path):
    assert fs.md5_encode("abc") == "900150983cd24fb0d6963f7d28e17f72"  # the MD5 test vector of "abc"
    path = fs.get_local_temp_path(REMOTE, str(tmp_path))
    assert path == os.path.join(tmp_path, fs.md5_encode(REMOTE), "file.txt") and os.path.isdir(os.path.dirname(path))


def test_directory_record_detects_added_entries(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "f1").write_text("1")
    record = fs._record_directory_structure(tmp_path / "d")
    assert fs._check_directory_structure(tmp_path / "d", record) is True
    (tmp_path / "d" / "f2").write_text("2")
    assert fs._check_directory_structure(tmp_path / "d", record) is False
    assert fs._check_directory_structure(tmp_path / "d", tmp_path / "missing") is False


@pytest.fixture()
def fake_remote(monkeypatch):
    """Every path is 'remote' and fs.copy writes an empty file; returns the list of copies made."""
    copies = []

    def fake_copy(src, dst, **kwargs):
        copies.append((src, dst))
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        Path(dst).write_bytes(b"")

    monkeypatch.setattr(fs, "is_non_local", lambda path: True)
    monkeypatch.setattr(fs, "copy", fake_copy)
    return copies


def test_remote_file_is_cached_once_and_recopied_on_request(tmp_path, fake_remote):
    cache = tmp_path / "cache"
    local = fs.copy_to_local(REMOTE, cache_dir=cache)
    assert local == os.path.join(cache, fs.md5_encode(REMOTE), "file.txt") and os.path.exists(local)
    assert len(fake_remote) == 1
    fs.copy_to_local(REMOTE, cache_dir=cache, always_recopy=True)
    assert len(fake_remote) == 2
    fs.copy_to_local(REMOTE, cache_dir=cache, verbose=True)
    assert len(fake_remote) == 2  # cached
    with pytest.raises(ValueError, match="trailing"):
        fs.copy_to_local(REMOTE + "/", cache_dir=cache)
