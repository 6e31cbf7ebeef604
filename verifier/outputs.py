"""One writer per output: an exclusive, kernel-released lock on a resumable output (section 4.4).

Every command that appends to a resumable output takes ``lock_output(path)`` before it reads or
changes anything there: the judging runner (``verifier.runner.judge``: its JSONL), ``JsonlAppender``
(its JSONL) and the commands whose output is a folder (``eval.verifierbench``, ``eval.proverbench``,
``data_pipeline.selection``, ``data_pipeline.candidates``, ``data_pipeline.augment``: the folder).

The lock is ``fcntl.flock`` on a sidecar file (``<file>.lock`` beside a file, ``<dir>/.lock`` in a
folder), so the atomic rewrites of the output itself (``write_jsonl``'s rename) never drop it. The
kernel releases it when the holder exits or is killed (SIGKILL included): a killed run never blocks
the next one, and the sidecar file left behind is harmless. A second process on the same output
stops at once with ``OutputLocked``, naming the output and the holder (pid, host, start time, its
command), before it changes anything. Within one process the lock is re-entrant (a command that
holds its folder may also take the lock of a file in it, or the same file twice).

``flock`` is per host on local disks; on NFS (v4) and Lustre/GPFS mounted with flock support Linux
maps it onto the file system's own locks, so two nodes of a cluster exclude each other as well.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from verifier.errors import UserError

T = TypeVar("T")

LOCK_NAME = ".lock"  # the sidecar of a folder output


class OutputLocked(UserError, ValueError):
    """Another process holds the lock of this output (a user error: exit non-zero, nothing changed)."""

    def __init__(self, output: str | os.PathLike, holder: dict | None):
        self.output = str(output)
        self.holder = holder or {}
        h = self.holder
        who = (f"pid {h.get('pid', '?')} on host {h.get('host', '?')}, started {h.get('started', '?')}"
               + (f" ({h['command']})" if h.get("command") else "")) if h else "a process that has not said who it is"
        super().__init__(f"output {self.output} is in use by {who}; another run is writing it. "
                         "Wait for it to finish (or stop it), or choose another output. Nothing was changed.")


def lock_path(path: str | os.PathLike) -> Path:
    """The sidecar lock file of an output: ``<dir>/.lock`` for a folder, ``<file>.lock`` for a file.

    >>> lock_path("runs/j.jsonl").as_posix(), lock_path("/tmp").as_posix()
    ('runs/j.jsonl.lock', '/tmp/.lock')
    """
    p = Path(path)
    return p / LOCK_NAME if p.is_dir() else p.with_name(p.name + ".lock")


def _command() -> str:
    """The program of this process, without its arguments (they may hold secrets)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None):
        return f"python -m {spec.name.removesuffix('.__main__')}"
    arg0 = sys.argv[0] if sys.argv else ""
    return "python -c" if arg0 in ("", "-c") else Path(arg0).name


def read_holder(path: str | os.PathLike) -> dict | None:
    """Who holds (or last held) the lock of an output, from its sidecar file; None when unknown."""
    try:
        doc = json.loads(lock_path(path).read_text(encoding="utf-8") or "null")
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


_held: dict[Path, list] = {}  # lock file -> [fd, depth]: this process's locks (re-entrant)
_guard = threading.Lock()


def _drop_in_child() -> None:
    """A forked child (e.g. a vLLM worker) closes its copies: the lock goes when the holder dies, not its children."""
    global _guard
    _guard = threading.Lock()
    for fd, _ in _held.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()


os.register_at_fork(after_in_child=_drop_in_child)


def acquire(path: str | os.PathLike) -> Path:
    """Take the lock of ``path`` (a file, or a folder that exists) or raise ``OutputLocked``; returns the lock file."""
    lp = lock_path(path).resolve()
    with _guard:
        if lp in _held:
            _held[lp][1] += 1
            return lp
        lp.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lp, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = None
            for _ in range(20):  # the holder writes who it is right after it locked
                holder = read_holder(path)
                if holder:
                    break
                time.sleep(0.05)
            raise OutputLocked(path, holder) from None
        except BaseException:
            os.close(fd)
            raise
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": _command()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        _held[lp] = [fd, 1]
        return lp


def release(lock_file: Path) -> None:
    """Give back one ``acquire`` of this process (the kernel lock goes with the last one)."""
    with _guard:
        entry = _held.get(lock_file)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del _held[lock_file]
            os.close(entry[0])  # closing the descriptor releases the flock


@contextlib.contextmanager
def lock_output(path: str | os.PathLike, *, folder: bool = False) -> Iterator[Path]:
    """Hold the exclusive lock of an output for the ``with`` block (``folder=True`` creates the folder first).

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> with lock_output(d + "/out.jsonl") as lf, lock_output(d + "/out.jsonl"):  # re-entrant in one process
    ...     lf.name, read_holder(d + "/out.jsonl")["pid"] == os.getpid()
    ('out.jsonl.lock', True)
    """
    if folder:
        Path(path).mkdir(parents=True, exist_ok=True)
    lf = acquire(path)
    try:
        yield lf
    finally:
        release(lf)


def holds_output(field: str = "out", *, folder: bool = True) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorator of a command's ``run(cfg)``: hold the lock of ``cfg.<field>`` (a folder, or a file with
    ``folder=False``) for the whole run, taken before anything is read or written. A missing value is
    left to ``run``'s own check."""

    def deco(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def wrapped(cfg: Any, *args: Any, **kwargs: Any) -> T:
            out = getattr(cfg, field, None)
            if not out or str(out) == "???":
                return fn(cfg, *args, **kwargs)
            with lock_output(out, folder=folder):
                return fn(cfg, *args, **kwargs)

        return wrapped

    return deco
