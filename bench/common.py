"""The parts every bench shares: the environment, stage resume and the ``key=value`` last line.

A bench is run as a script (``python bench/NAME.py KEY=VALUE ...``), so it puts the repository on ``sys.path``
itself, in one line, and then imports this module::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.common import REPO, environment, last_line

    environment(wandb=True)  # before importing torch, transformers or vLLM

The last line of a bench's output is its contract (the Makefile, CI and reports read it): ``key=value`` pairs
separated by one space, keys and number formats fixed per bench (``tests/test_bench_last_lines.py``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# stage resume lives in the library (training.stages); re-exported for the benches
from training.stages import done_stage, mark_done, settings_of  # noqa: F401

REPO = Path(__file__).resolve().parents[1]

ENVIRONMENT = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
WANDB_OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}


def environment(wandb: bool = False, **extra: str) -> None:
    """Set the benches' environment defaults (a value the caller already set wins): one OpenMP thread, no
    tokenizer parallelism, offline Hugging Face hub; ``wandb``: W&B offline and silent; ``extra``: more names."""
    for name, value in {**ENVIRONMENT, **(WANDB_OFFLINE if wandb else {}), **extra}.items():
        os.environ.setdefault(name, value)


# ------------------------------------------------------------------ the last line
def key_values(values: Mapping[str, Any], fmt: str = ".4f", formats: Mapping[str, str] | None = None) -> str:
    """``key=value`` pairs in the order of ``values``: strings as they are, numbers with ``formats[key]`` or
    ``fmt`` (an integer too: give its key ``"d"``); ``None`` is ``nan``.

    >>> key_values({"speedup": 2.345, "rows": 7, "ci_low": None, "agreement": 0.5}, ".2f", {"rows": "d", "agreement": ".3f"})
    'speedup=2.35 rows=7 ci_low=nan agreement=0.500'
    """
    formats = formats or {}

    def one(key: str, v: Any) -> str:
        if isinstance(v, str):
            return v
        return format(math.nan if v is None else v, formats.get(key, fmt))

    return " ".join(f"{k}={one(k, v)}" for k, v in values.items())


def last_line(values: Mapping[str, Any], fmt: str = ".4f", formats: Mapping[str, str] | None = None) -> str:
    """Print a bench's last line (``key_values``) and return it."""
    line = key_values(values, fmt, formats)
    print(line, flush=True)
    return line
