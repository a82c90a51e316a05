"""Timing checkpoints: ``telemetry.checkpoint(...)`` around any save or load (:class:`CheckpointTimer`),
and ``torch.distributed.checkpoint``'s ``save``, ``async_save`` and ``load`` timed by themselves
(:func:`instrument_checkpoints`; wrapped at once when DCP is imported, else by an import hook).

Each becomes one CHECKPOINT event (recorder/events.py) when the call returns: the time blocked, the
bytes the storage layer reports and the rank's own storage time (:class:`_Count`: every rank of a DCP
save waits for the slowest at its end, so only this part tells the slow rank apart); an async save's
upload is a second, non-blocking event. The wrappers never change what the call does or returns; an
exception passes through (the checkpoint is then not counted). The columns and the limits:
docs/instrumenting.md, "Checkpoints".
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..logonce import LogOnce
from ..recorder import current as _current
from ..recorder import events as ev
from ..recorder.null import NULL

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType, TracebackType

    from torch.distributed.checkpoint.metadata import Metadata
    from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner, SavePlan, SavePlanner
    from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
    from torch.futures import Future

    from ..recorder.null import NullRecorder
    from ..recorder.wall import Recorder

KINDS = ("save", "load")
_once = LogOnce()
_lock = threading.Lock()
_originals: dict[str, Callable] = {}


class CheckpointTimer:
    """``with telemetry.checkpoint("save", nbytes=n):``: the block's time as one blocking checkpoint
    of this rank; ``nbytes`` may also be set inside the block (``ck.nbytes = ...``) once known."""

    __slots__ = ("kind", "nbytes", "path", "_t0", "_rec")

    def __init__(self, kind: str = "save", path: str | None = None, nbytes: int | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"telemetry.checkpoint: kind must be one of {', '.join(KINDS)}; got {kind!r}")
        if nbytes is not None and (not isinstance(nbytes, int) or nbytes < 0):
            raise ValueError(f"telemetry.checkpoint: nbytes must be a non-negative int or None; got {nbytes!r}")
        self.kind, self.path, self.nbytes = kind, path, nbytes
        self._t0 = 0
        self._rec: Recorder | NullRecorder | None = None  # the recorder at __enter__

    def __enter__(self) -> CheckpointTimer:
        self._rec = _current._active
        self._t0 = self._rec.now() if self._rec is not NULL else 0
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        rec = self._rec
        if rec is not NULL and exc_type is None:
            try:
                assert rec is not None  # set at __enter__
                n = self.nbytes if self.nbytes is not None else _path_bytes(self.path)
                rec.emit((ev.CHECKPOINT, rec.now(), self.kind, self._t0, int(n or 0), True, 0))
            except Exception:  # noqa: BLE001 - telemetry never breaks the user's save
                _once("timer", "telemetry: a checkpoint was not recorded", exc_info=True)
        return False


def _file_stats(path: str | None) -> list[os.stat_result]:
    """The stat of ``path`` (a file) or of every file under it (a directory); none when unknown."""
    if not path:
        return []
    if os.path.isfile(path):
        found = [path]
    else:
        found = [os.path.join(folder, f) for folder, _, files in os.walk(path) for f in files]
    out = []
    for f in found:
        try:
            out.append(os.stat(f))
        except OSError:
            pass
    return out


def _path_bytes(path: str | None) -> int:
    """The size of ``path`` (a file, or every file under a directory), 0 when unknown."""
    return sum(st.st_size for st in _file_stats(path))


def mark_saved(path: str, kind: str = "save") -> bool:
    """A save that already happened, marked from its files: bytes their sizes, its span from the
    earliest to the latest modification time (a lower bound of the time it blocked: the first file's
    own write is not in it). For a framework that tells us of a save only after it (the Hugging Face
    Trainer's ``on_save``). False when nothing was found or telemetry is off."""
    rec = _current._active
    stats = _file_stats(path) if rec is not NULL else []
    if not stats:
        return False
    times = [st.st_mtime_ns for st in stats]
    now, wall = rec.now(), time.time_ns()
    t1 = min(now, now - (wall - max(times)))
    t0 = min(t1, now - (wall - min(times)))
    rec.emit((ev.CHECKPOINT, t1, kind, t0, sum(st.st_size for st in stats), True, 0))
    return True


class _Count:
    """This rank's part of one DCP call: bytes and storage nanoseconds, added by the storage
    wrapper (from whichever thread runs it)."""

    __slots__ = ("nbytes", "io_ns")

    def __init__(self) -> None:
        self.nbytes = 0
        self.io_ns = 0


def _on_instance(obj: object, **methods: Callable) -> Callable[[], None]:
    """Set ``methods`` on the instance ``obj``; returns what puts back what it had (a writer the user
    passes again is wrapped afresh each call, never wrapper on wrapper)."""
    had = {k: obj.__dict__[k] for k in methods if k in getattr(obj, "__dict__", {})}
    for k, fn in methods.items():
        setattr(obj, k, fn)

    def undo() -> None:
        for k in methods:
            if k in had:
                setattr(obj, k, had[k])
            else:
                obj.__dict__.pop(k, None)

    return undo


def _count_writes(writer: StorageWriter, count: _Count, now: Callable[[], int]) -> Callable[[], None]:
    """Wrap ``writer``'s ``write_data`` (on the instance) to add its WriteResults' sizes and the time
    to its future's completion, and ``finish`` to add the metadata file's size where it is a file;
    returns the undo."""
    write_data, finish = writer.write_data, writer.finish

    def timed_write(plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        t0 = now()
        fut = write_data(plan, planner)

        def done(f: Any) -> None:  # a torch Future, or a concurrent.futures one
            try:
                results = f.value() if hasattr(f, "value") else f.result()
                count.nbytes += sum(int(getattr(r, "size_in_bytes", 0) or 0) for r in results)
                count.io_ns += now() - t0
            except Exception:  # noqa: BLE001 - a failed write is DCP's to report
                pass

        try:
            fut.then(done) if hasattr(fut, "then") else fut.add_done_callback(done)
        except Exception:  # noqa: BLE001 - no count, the save goes on
            pass
        return fut

    def counted_finish(metadata: Metadata, results: list[list[WriteResult]]) -> None:
        out = finish(metadata, results)
        path = getattr(writer, "metadata_path", None) or getattr(writer, "path", None)
        try:
            meta = os.path.join(str(path), ".metadata") if path is not None and os.path.isdir(str(path)) else None
            if meta and os.path.isfile(meta):
                count.nbytes += os.path.getsize(meta)
        except (OSError, TypeError):
            pass
        return out

    return _on_instance(writer, write_data=timed_write, finish=counted_finish)


def _count_reads(reader: StorageReader, count: _Count, now: Callable[[], int]) -> Callable[[], None]:
    """Wrap ``reader``'s ``set_up_storage_reader`` (to keep the checkpoint's metadata) and ``read_data``
    (to add the stored length of each item this rank reads, each stored item once, and the time to its
    future's completion); returns the undo."""
    setup, read_data = reader.set_up_storage_reader, reader.read_data
    meta: dict[str, Metadata] = {}

    def kept_setup(metadata: Metadata, is_coordinator: bool, *a: Any, **k: Any) -> None:
        meta["m"] = metadata
        return setup(metadata, is_coordinator, *a, **k)

    def timed_read(plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        t0 = now()
        try:
            storage = getattr(meta.get("m"), "storage_data", None) or {}
            seen = {item.storage_index for item in plan.items}
            count.nbytes += sum(int(getattr(storage.get(i), "length", 0) or 0) for i in seen)
        except Exception:  # noqa: BLE001 - no bytes, the load goes on
            pass
        fut = read_data(plan, planner)
        try:
            fut.wait()  # DCP waits for it at once too: the rank's read time
        except Exception:  # noqa: BLE001 - DCP's to report
            pass
        count.io_ns += now() - t0
        return fut

    return _on_instance(reader, set_up_storage_reader=kept_setup, read_data=timed_read)


def _storage(kind: str, kwargs: dict[str, Any]) -> StorageWriter | StorageReader | None:
    """The storage writer (save) or reader (load) the call uses: the caller's, or the file-system one DCP
    would pick for a local ``checkpoint_id`` (then passed in ``kwargs``); None when neither."""
    from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter

    key = "storage_writer" if kind == "save" else "storage_reader"
    obj = kwargs.get(key)
    if obj is not None:
        return obj
    cid = kwargs.get("checkpoint_id")
    cls = FileSystemWriter if kind == "save" else FileSystemReader
    if cid is not None and cls.validate_checkpoint_id(cid):
        kwargs[key] = obj = cls(cid)
        return obj
    _once(f"storage:{kind}", "telemetry: a DCP %s with no storage we can count: timed without bytes", kind)
    return None


def _wrap(name: str, fn: Callable) -> Callable:
    kind = "load" if name == "load" else "save"
    is_async = name == "async_save"

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec = _current._active
        if rec is NULL:
            return fn(*args, **kwargs)
        count = _Count()
        undo: Callable[[], None] = lambda: None  # noqa: E731 - nothing to put back
        try:
            storage = _storage(kind, kwargs)
            if storage is not None:
                undo = (_count_writes if kind == "save" else _count_reads)(storage, count, rec.now)  # pyright: ignore[reportArgumentType] - kind picks the writer's or the reader's
        except Exception:  # noqa: BLE001 - uncounted, never broken
            _once(f"wrap:{name}", "telemetry: a DCP %s is timed without bytes", name, exc_info=True)
        t0 = rec.now()
        try:
            out = fn(*args, **kwargs)
        except BaseException:
            undo()
            raise
        t1 = rec.now()
        try:
            if is_async:
                rec.emit((ev.CHECKPOINT, t1, kind, t0, 0, True, 0))
                fut = getattr(out, "upload_completion", out)  # AsyncSaveResponse or a Future

                def uploaded(f: Any) -> None:  # a torch Future, or a concurrent.futures one
                    try:
                        undo()
                        if f.exception() is None:
                            rec.emit((ev.CHECKPOINT, rec.now(), kind, t1, count.nbytes, False, count.io_ns))
                    except Exception:  # noqa: BLE001 - a callback never raises into DCP's thread
                        pass

                fut.add_done_callback(uploaded)
            else:
                undo()
                rec.emit((ev.CHECKPOINT, t1, kind, t0, count.nbytes, True, count.io_ns))
        except Exception:  # noqa: BLE001 - telemetry never breaks the user's save
            _once(f"emit:{name}", "telemetry: a DCP %s was not recorded", name, exc_info=True)
        return out

    wrapper.__wrapped_by_telemetry__ = True  # pyright: ignore[reportAttributeAccessIssue] - a function takes any attribute
    return wrapper


DCP = "torch.distributed.checkpoint"


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Wraps DCP's functions as soon as something imports ``torch.distributed.checkpoint`` (after its
    module ran, before the import returns), so that ``init`` need not import it: about a second, for
    every job, whether it checkpoints or not."""

    def __init__(self) -> None:
        self._busy = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != DCP or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec(fullname)  # the other finders' answer
        except Exception:  # noqa: BLE001 - not ours to fail an import: the others decide
            return None
        finally:
            self._busy = False
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return None
        run = loader.exec_module

        def exec_then_wrap(module: ModuleType) -> None:
            run(module)
            try:
                _wrap_all(module)
            except Exception:  # noqa: BLE001 - the import goes on, untimed
                _once("import", "telemetry: DCP's functions were not wrapped", exc_info=True)

        loader.exec_module = exec_then_wrap
        return spec


_finder: _WrapOnImport | None = None


def _wrap_all(dcp: ModuleType) -> None:
    with _lock:
        for name in ("save", "async_save", "load"):
            fn = getattr(dcp, name, None)
            if fn is None or getattr(fn, "__wrapped_by_telemetry__", False):
                continue
            _originals[name] = fn
            setattr(dcp, name, _wrap(name, fn))


def instrument_checkpoints() -> bool:
    """Wrap ``torch.distributed.checkpoint``'s ``save``, ``async_save`` and ``load``: now when it is
    imported already, else when something imports it (an import hook; nothing is imported here)."""
    global _finder
    dcp = sys.modules.get(DCP)
    if dcp is not None:
        _wrap_all(dcp)
        return True
    with _lock:
        if _finder is None:
            _finder = _WrapOnImport()
            sys.meta_path.insert(0, _finder)
    return True


def uninstrument_checkpoints() -> None:
    global _finder
    with _lock:
        if _finder is not None:
            try:
                sys.meta_path.remove(_finder)
            except ValueError:
                pass
            _finder = None
        dcp = sys.modules.get(DCP)
        for name, fn in _originals.items():
            if dcp is not None:
                setattr(dcp, name, fn)
        _originals.clear()
