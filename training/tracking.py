"""W&B for training runs: the run name from the experiment and its overrides, the mode, the run itself."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from training.config import GRPORunConfig
from verifier.config import is_secret_override, redact
from verifier.results import WandbConfig, resolve_mode


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


def init_wandb(cfg: GRPORunConfig, out: Path, is_main: bool):
    """Start (or, on resume, continue) the W&B run; TRL's callback then logs into it."""
    mode = wandb_mode(cfg.wandb)
    if mode == "disabled" or not is_main:
        return None
    import wandb  # imported when a run logs (seconds to import)

    os.environ["WANDB_MODE"] = mode
    id_file = out / "wandb_run_id.txt"
    run_id = id_file.read_text().strip() if (cfg.resume and id_file.exists()) else uuid.uuid4().hex[:12]
    id_file.write_text(run_id)
    run = wandb.init(project=cfg.wandb.project, entity=cfg.wandb.entity, group=cfg.wandb.group or cfg.experiment_name,
                     name=cfg.wandb.name or run_name(cfg), id=run_id, resume="allow", dir=cfg.wandb.dir or str(out),
                     mode=mode,
                     tags=list(cfg.wandb.tags) + [cfg.experiment_name], config=redact(cfg))
    return run
