"""Stage resume for multi-stage recipes (the loop of ``training.loop``, the benches): a finished stage leaves a
marker with the settings it ran with; a re-run with the same settings reuses it, other settings are an error
naming the keys that differ (silently reusing a stage trained with other knobs would mix experiments)."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verifier.errors import InputError


def settings_of(obj: Any) -> Any:
    """A JSON-comparable form of a (nested) config dataclass: what a resumed stage must match."""
    return json.loads(json.dumps(dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj, default=str))


def differing_keys(have: Any, want: Any) -> list[str]:
    """The top-level keys whose values differ (``["<settings>"]`` when either side is not a mapping).

    >>> differing_keys({"a": 1, "b": 2}, {"a": 1, "b": 3, "c": 0})
    ['b', 'c']
    """
    if not (isinstance(have, dict) and isinstance(want, dict)):
        return [] if have == want else ["<settings>"]
    return sorted(k for k in {*have, *want} if have.get(k) != want.get(k))


def done_stage(marker: Path, settings: Any, resume: bool) -> bool:
    """True when ``marker`` records exactly ``settings`` (the stage finished with them and can be reused).

    A marker with other settings is an error naming the differing keys; without ``resume`` an existing marker
    is an error too.
    """
    if not marker.is_file():
        return False
    have = json.loads(marker.read_text())
    if not resume:
        raise InputError(f"{marker.parent}: a finished stage is there and resume=false: use another out= or delete it")
    if have != settings:
        raise InputError(f"{marker.parent}: finished with other settings ({', '.join(differing_keys(have, settings))} "
                         "differ): use another out= or delete that folder")
    return True


def mark_done(marker: Path, settings: Any) -> None:
    """Record that the stage in ``marker.parent`` finished with ``settings`` (atomic)."""
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps(settings, indent=1, sort_keys=True))
    os.replace(tmp, marker)


def run_stage(d: Path, marker: str, settings: Any, fn: Callable[[Path], Any], resume: bool,
              log: Callable[[str], None], label: str, say_start: bool = False) -> Any:
    """Stage ``fn(d)`` unless it finished in ``d`` with ``settings`` (then its ``d/result.json``, read back): the
    result is kept in ``d/result.json``, the settings in ``d/<marker>`` (``mark_done``); ``log`` says
    ``<label>: resumed ...`` or ``<label>: done in <s>s`` (and ``<label>: started`` with ``say_start``)."""
    if done_stage(d / marker, settings, resume):
        log(f"{label}: resumed (finished with these settings)")
        return json.loads((d / "result.json").read_text())
    d.mkdir(parents=True, exist_ok=True)
    if say_start:
        log(f"{label}: started")
    t = time.monotonic()
    result = fn(d)
    (d / "result.json").write_text(json.dumps(result, indent=1, default=str))
    mark_done(d / marker, settings)
    log(f"{label}: done in {time.monotonic() - t:.0f}s")
    return result
