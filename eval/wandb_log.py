"""Weights & Biases logging shared by the evaluator and training (offline unless an API key is set).

``init_run`` picks the mode: the config's ``mode`` if given, else ``WANDB_MODE`` from the
environment, else ``online`` when ``WANDB_API_KEY`` is set and ``offline`` otherwise, so
nothing is ever sent anywhere by default. Offline runs are written under ``dir`` and can
be uploaded later with ``wandb sync DIR/wandb/offline-run-*``.

Reusable pieces: ``init_run``, ``log_metrics`` (flattens ``{"value", "ci"}`` metrics),
``log_images``, ``log_table``; ``log_eval`` does all of it for one evaluation directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from verifier.config import redact


def resolve_mode(mode: str | None = None) -> str:
    """online / offline / disabled.

    >>> resolve_mode("disabled")
    'disabled'
    """
    if mode:
        return mode
    env = os.environ.get("WANDB_MODE")
    if env:
        return env
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    if cfg is None:
        return default
    if isinstance(cfg, Mapping):
        return cfg.get(key, default)
    return getattr(cfg, key, default)


def init_run(wandb_cfg: Any, config: Mapping[str, Any] | None, out_dir: str | os.PathLike,
             job_type: str = "eval"):
    """Start a W&B run (``wandb_cfg``: any object or dict with project/entity/name/mode/dir/tags)."""
    import wandb

    d = Path(_get(wandb_cfg, "dir") or Path(out_dir))
    d.mkdir(parents=True, exist_ok=True)
    return wandb.init(
        project=_get(wandb_cfg, "project", "proofverifier"),
        entity=_get(wandb_cfg, "entity"),
        name=_get(wandb_cfg, "name"),
        tags=list(_get(wandb_cfg, "tags") or []),
        mode=resolve_mode(_get(wandb_cfg, "mode")),
        dir=str(d),
        job_type=job_type,
        config=redact(dict(config or {})),  # no API key reaches W&B
        reinit="finish_previous",
        settings=wandb.Settings(silent=True, console="off"),
    )


def flat_metrics(doc: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """``{"rough.tpr": {"value": .8, "ci": [.7, .9]}}`` -> ``{"rough.tpr": .8, "rough.tpr.ci_lo": .7, ...}``.

    Nested groups (breakdowns) are flattened with ``/``; non-numeric leaves are dropped.

    >>> flat_metrics({"rough.tpr": {"value": 0.8, "ci": [0.7, 0.9], "counts": {"tp": 8, "pos": 10}}, "n": 5})
    {'rough.tpr': 0.8, 'rough.tpr.ci_lo': 0.7, 'rough.tpr.ci_hi': 0.9, 'rough.tpr.tp': 8.0, 'rough.tpr.pos': 10.0, 'n': 5.0}
    """
    out: dict[str, float] = {}
    for k, v in doc.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and "value" in v:
            if v["value"] is not None:
                out[key] = float(v["value"])
            ci = v.get("ci")
            if ci and ci[0] is not None:
                out[f"{key}.ci_lo"], out[f"{key}.ci_hi"] = float(ci[0]), float(ci[1])
            for ck, cv in (v.get("counts") or {}).items():
                if isinstance(cv, (int, float)) and not isinstance(cv, bool):
                    out[f"{key}.{ck}"] = float(cv)
        elif isinstance(v, Mapping):
            out.update(flat_metrics(v, f"{key}/"))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = float(v)
    return out


def log_metrics(run, doc: Mapping[str, Any], prefix: str = "", step: int | None = None,
                summary: bool = True) -> dict[str, float]:
    """Log flattened metrics (and put them in the run summary)."""
    flat = flat_metrics(doc, prefix)
    if flat:
        run.log(flat, step=step)
        if summary:
            run.summary.update(flat)
    return flat


def log_images(run, paths: Iterable[str | os.PathLike], prefix: str = "plots/") -> list[str]:
    """Log PNG files as ``wandb.Image`` under ``plots/<stem>``."""
    import wandb

    logged = []
    imgs = {}
    for p in paths:
        p = Path(p)
        if p.exists():
            imgs[f"{prefix}{p.stem}"] = wandb.Image(str(p))
            logged.append(p.name)
    if imgs:
        run.log(imgs)
    return logged


def log_table(run, name: str, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> int:
    """Log rows of dicts as a ``wandb.Table``; returns the number of rows."""
    import wandb

    if not rows:
        return 0
    cols = list(columns or rows[0].keys())
    table = wandb.Table(columns=cols, data=[[_cell(r.get(c)) for c in cols] for r in rows])
    run.log({name: table})
    return len(rows)


def _cell(v: Any) -> Any:
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    return str(v)


def judgment_rows(gold, preds) -> list[dict[str, Any]]:
    """One row per scored trajectory: gold polarity/step, predicted verdict/step, grade, passes."""
    rows = []
    for g in gold:
        p = preds.get(g.id)
        if p is None:
            continue
        ann = g.annotation
        rows.append({
            "id": g.id, "problem_id": g.problem_id, "split": g.split, "subject": g.subject,
            "gold_verdict": None if ann is None else ann.polarity.value,
            "gold_first_fatal_step": None if ann is None else ann.first_fatal_error_step,
            "verdict": None if p.verdict is None else p.verdict.value,
            "first_error_step": p.first_error_step,
            "meta_grade": None if p.meta_grade is None else p.meta_grade.value,
            "n_passes": len(p.passes),
            "n_accept": sum(1 for q in p.passes if q.accepts),
        })
    return rows


def log_eval(out_dir: str | os.PathLike, doc: Mapping[str, Any], cfg: Mapping[str, Any], wandb_cfg: Any,
             gold=None, preds=None, rows: Sequence[Mapping[str, Any]] | None = None,
             job_type: str = "eval") -> str:
    """Config, metrics, a judgments table and the plots of ``out_dir``; returns the run directory."""
    run = init_run(wandb_cfg, cfg, out_dir, job_type=job_type)
    try:
        log_metrics(run, {k: v for k, v in doc.items() if k not in ("config", "inputs", "k_curve", "ids")})
        if rows is None and gold is not None and preds is not None:
            rows = judgment_rows(gold, preds)
        log_table(run, "judgments", rows or [])
        curve = [{"policy": r["policy"], "k": r["k"], "acceptance": r["acceptance"]["value"],
                  **{k: v["value"] for k, v in (r.get("metrics") or {}).items()}} for r in doc.get("k_curve") or []]
        log_table(run, "k_curve", curve)
        log_images(run, sorted(Path(out_dir).glob("*.png")))
        return str(run.dir)
    finally:
        run.finish()
