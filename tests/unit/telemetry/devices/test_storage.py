"""Bytes read from storage by a rank and its children (telemetry/devices/storage.py), on a fake /proc
laid out as the kernel's, and on the real one with a read that misses the page cache."""

import os
import subprocess
import sys

import pytest

from telemetry.devices.sched import Unavailable
from telemetry.devices.storage import StorageSource


def _proc(root, pid: int, read_bytes: int, children: dict[int, list[int]] | None = None) -> None:
    d = root / str(pid)
    (d / "task").mkdir(parents=True, exist_ok=True)
    (d / "io").write_text(f"rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: {read_bytes}\nwrite_bytes: 0\n")
    for tid, kids in (children or {pid: []}).items():
        (d / "task" / str(tid)).mkdir(exist_ok=True)
        (d / "task" / str(tid) / "children").write_text(" ".join(map(str, kids)) + (" " if kids else ""))


def test_the_rank_and_its_workers_count_from_when_telemetry_started(tmp_path):
    _proc(tmp_path, 10, 5000, {10: [11], 12: []})  # a worker (11) listed under the main thread
    _proc(tmp_path, 11, 700)
    src = StorageSource(pid=10, proc=str(tmp_path))
    assert src.read() == {"storage_read_bytes": 0.0}  # what they read before: not ours
    _proc(tmp_path, 10, 5100, {10: [11], 12: [13]})  # a new worker started by another thread
    _proc(tmp_path, 11, 1700)
    _proc(tmp_path, 13, 50, {13: [14]})  # and its own child
    _proc(tmp_path, 14, 8)
    assert src.read() == {"storage_read_bytes": 100.0 + 1000 + 50 + 8}


def test_an_exited_worker_and_a_reused_pid_never_take_bytes_back(tmp_path):
    _proc(tmp_path, 10, 0, {10: [11]})
    _proc(tmp_path, 11, 1000)
    src = StorageSource(pid=10, proc=str(tmp_path))
    _proc(tmp_path, 11, 3000)
    assert src.read()["storage_read_bytes"] == 2000.0
    _proc(tmp_path, 10, 0, {10: []})  # the worker exited (its file may linger: not listed, not read)
    assert src.read()["storage_read_bytes"] == 2000.0
    _proc(tmp_path, 10, 0, {10: [11]})  # pid 11 again: a new process, counted from 0
    _proc(tmp_path, 11, 400)
    assert src.read()["storage_read_bytes"] == 2400.0


def test_no_io_file_is_no_source():
    with pytest.raises(Unavailable, match="io unreadable"):
        StorageSource(pid=10, proc="/nonexistent")


def test_a_child_reading_a_file_past_the_page_cache_is_counted_on_the_real_proc(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(os.urandom(4 << 20))
    src = StorageSource()
    code = (
        "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); "
        "os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); "  # out of the cache: a storage read
        "import time; data=b''.join(iter(lambda: os.read(fd, 1<<20), b'')); "
        "sys.stdout.write(str(len(data))); sys.stdout.flush(); sys.stdin.read()"  # stay alive to be read
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout.read(len(str(4 << 20))) == str(4 << 20).encode()
        got = src.read()["storage_read_bytes"]
    finally:
        child.stdin.close()
        child.wait(30)
    # the child read the whole file from storage (plus its interpreter's own files, where they missed)
    assert got >= 4 << 20
