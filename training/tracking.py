"""W&B for training runs (GRPO and SFT): the run name from the experiment and its overrides, the mode, the run
itself (the ladder's one project, one group per ladder: ``verifier.results.ladder_wandb``; started by
``verifier.results.init_run``, the one place a W&B run starts)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from training.config import GRPORunConfig
from verifier.config import is_secret_override
from verifier.results import WandbConfig, init_run, ladder_group, resolve_mode


def run_name(cfg: GRPORunConfig) -> str:
    """W&B / TRL run name: the experiment plus the overrides that are not paths.

    >>> run_name(GRPORunConfig(experiment_name="rough_rl", overrides=["experiment=rough_rl", "grpo.learning_rate=1e-6",
    ...                                                                "output_dir=/tmp/x"]))
    'rough_rl,grpo.learning_rate=1e-6'
    """
    skip = ("experiment=", "output_dir=", "resume=", "hydra.", "wandb.", "launch.")
    extra = [o.lstrip("+~") for o in cfg.overrides
             if not o.lstrip("+~").startswith(skip) and not is_secret_override(o)]  # no API key in a run name
    return ",".join([cfg.experiment_name, *extra])[:128]


def wandb_mode(settings: WandbConfig) -> str:
    """``auto`` -> env WANDB_MODE, else online with a key (env WANDB_API_KEY), offline without.

    >>> wandb_mode(WandbConfig(enabled=False)), wandb_mode(WandbConfig(mode="offline"))
    ('disabled', 'offline')
    """
    if not settings.enabled:
        return "disabled"
    return resolve_mode(settings.mode)


def start_run(settings: WandbConfig, out: Path, *, name: str, tags: list[str], config: Any, job_type: str,
              is_main: bool = True, resume: bool = False):
    """A ladder command's W&B run (SFT, GRPO), started by ``verifier.results.init_run``: project ``wandb.project``,
    group :func:`ladder_group` of ``out`` (the ladder's folder), the redacted config (no API key reaches W&B), the
    run id kept in ``out/wandb_run_id.txt`` (continued on resume). None when W&B is off or on a rank other than
    the main one; TRL's W&B callback then logs into this run."""
    mode = wandb_mode(settings)
    if mode == "disabled" or not is_main:
        return None
    os.environ["WANDB_MODE"] = mode  # TRL's callback and any child process: the same mode
    id_file = out / "wandb_run_id.txt"
    run_id = id_file.read_text().strip() if (resume and id_file.exists()) else uuid.uuid4().hex[:12]
    id_file.write_text(run_id)
    return init_run(settings, config, settings.dir or str(out), job_type=job_type, group=ladder_group(settings, out),
                    name=name, tags=tags, run_id=run_id, mode=mode, console=True)


def init_wandb(cfg: GRPORunConfig, out: Path, is_main: bool, name: str):
    """Start (or, on resume, continue) the W&B run ``name`` (:func:`run_name`) of a ladder row; TRL's callback
    then logs into it."""
    return start_run(cfg.wandb, out, name=name, tags=[cfg.experiment_name], config=cfg, job_type="grpo",
                     is_main=is_main, resume=cfg.resume)
