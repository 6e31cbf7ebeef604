"""The held-out evaluation after training: VerifierBench on the saved checkpoint (section 5.4, Table 3).

The same path as ``python -m eval.verifierbench``; the meta-verifier is the reward's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from eval.verifierbench import VerifierBenchConfig
from eval.verifierbench import run as verifierbench
from training.config import GRPORunConfig
from verifier.io import write_jsonl
from verifier.results import WandbConfig


def heldout_config(cfg: GRPORunConfig, out: Path, data_path: Path, model_dir: str):
    """The VerifierBench config of the held-out evaluation (the same path as ``python -m eval.verifierbench``)."""
    e, r = cfg.eval, cfg.reward
    meta = r.meta_verifier(run_seed=cfg.grpo.seed)  # the reward's meta-verifier (endpoint.max_tokens: its budget)
    judge = e.judge_config(with_reference=cfg.data.with_reference, template=cfg.data.prompt_template)
    offline = dataclasses.replace(e.offline, model=str(model_dir))
    return VerifierBenchConfig(data=str(data_path), out=str(out), engine=e.engine,
                               verifier=e.endpoint, offline=offline, judge=judge, meta=meta,
                               meta_threshold=e.meta_threshold, bootstrap=e.bootstrap,
                               grade_every_pass=True, progress=e.progress,
                               title=f"{cfg.experiment_name}: held-out VerifierBench", wandb=WandbConfig(enabled=False))


def evaluate_heldout(cfg: GRPORunConfig, out: Path, trajs, model_dir: str) -> dict[str, Any]:
    """Main process only, no collective: VerifierBench on the held-out trajectories, in ``out/heldout``."""
    d = out / "heldout"
    d.mkdir(parents=True, exist_ok=True)
    data = d / "held_out.jsonl"
    write_jsonl(data, trajs)
    doc = verifierbench(heldout_config(cfg, d, data, model_dir))
    doc["heldout"] = {**doc.pop("run"), "dir": str(d), "model": str(model_dir)}
    doc["label"] = cfg.experiment_name
    ev = dataclasses.asdict(cfg.eval)
    ev["endpoint"]["api_key"] = "***" if ev["endpoint"].get("api_key") else None
    doc["eval_config"] = ev
    return doc
