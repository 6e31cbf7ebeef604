"""Hydra callbacks of our apps.

``RedactSavedConfig``: a ``-m`` sweep saves its whole config, command-line API keys
included, to ``<hydra.sweep.dir>/multirun.yaml`` before the first job; this rewrites that
file without secrets (``verifier.config.redact``) when a job starts and when the sweep ends.
(Single runs save nothing: every app sets ``hydra.output_subdir: null``.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from verifier.config import redact


def redact_saved_config(path: str | Path) -> bool:
    """Rewrite one saved Hydra YAML without secrets; True when something was redacted."""
    p = Path(path)
    if not p.is_file():
        return False
    doc = OmegaConf.to_container(OmegaConf.load(p), resolve=False)
    clean = redact(doc)
    if clean == doc:
        return False
    OmegaConf.save(OmegaConf.create(clean), p)
    return True


class RedactSavedConfig(Callback):
    """Keep API keys out of ``multirun.yaml`` (configs/grpo.yaml ``hydra.callbacks``)."""

    def _scrub(self, config: DictConfig) -> None:
        sweep = OmegaConf.select(config, "hydra.sweep.dir", default=None)
        if sweep:
            redact_saved_config(Path(str(sweep)) / "multirun.yaml")

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._scrub(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._scrub(config)
