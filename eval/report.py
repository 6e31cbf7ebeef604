"""Table-3-style ablation tables over run directories (section 5.4).

* ``python -m eval.report runs=[DIR,...] out=DIR [base=LABEL]`` - the ablation table of
  section 5.4 / Table 3: one row per run (a directory with ``metrics.json``), Rough and
  Meta-Verification TPR / TNR / Balanced F1 with deltas against the base row (▲ / ▼),
  ``ablation.md``, ``ablation.json`` and ``ablation.png``.

The per-run report (``report.md`` + PNGs next to ``metrics.json``) is written by
``verifier.results.write_report``, as are this command's files.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from verifier.config import hydra_main
from verifier.errors import InputError
from verifier.results import (
    HEADLINE,
    WandbConfig,
    init_run,
    ladder_group,
    ladder_wandb,
    log_images,
    log_table,
    metric_value,
    plot_tpr_tnr,
    write_markdown,
    write_metrics,
)

# --------------------------------------------------------------------------- ablation sweeps


# Table 3's rows in the paper's order (section 5.4): a sweep directory is reported in this order
LADDER_ROWS = ("base", "rough_rl", "meta_ver_rl", "extra_ann", "pos_aug", "pess_ver")


def ladder_order(name: str) -> tuple[int, str]:
    """Sort key of a run directory name: the ladder's rows in Table 3's order, then any other name by name.

    >>> sorted(["zeta", "pess_ver", "base", "alpha", "rough_rl"], key=ladder_order)
    ['base', 'rough_rl', 'pess_ver', 'alpha', 'zeta']
    """
    return (LADDER_ROWS.index(name), "") if name in LADDER_ROWS else (len(LADDER_ROWS), name)


def find_runs(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Run directories: each path that holds metrics.json, or its subdirectories that do (the ladder's rows in
    Table 3's order, ``LADDER_ROWS``, then any other subdirectory by name); explicit paths keep their order."""
    runs: list[Path] = []
    for p in map(Path, paths):
        if (p / "metrics.json").exists():
            runs.append(p)
        elif p.is_dir():
            subs = sorted((d for d in p.iterdir() if (d / "metrics.json").exists()), key=lambda d: ladder_order(d.name))
            if not subs:
                raise FileNotFoundError(f"{p}: no metrics.json in it or in its subdirectories")
            runs += subs
        else:
            raise FileNotFoundError(f"{p}: not a run directory (no metrics.json)")
    return runs


def ablation_table(docs: Sequence[tuple[str, Mapping[str, Any]]], base: str | None = None,
                   metrics: Sequence[str] = HEADLINE) -> dict[str, Any]:
    """Rows of values (%) and deltas (percentage points) against the base row (default: the first).

    >>> t = ablation_table([("base", {"rough.tpr": {"value": .5}}), ("+RL", {"rough.tpr": {"value": .6}})],
    ...                    metrics=["rough.tpr"])
    >>> t["rows"][1]["values"]["rough.tpr"], t["rows"][1]["deltas"]["rough.tpr"]
    (60.0, 10.0)
    """
    labels = [lab for lab, _ in docs]
    if base is None:
        base = labels[0]
    if base not in labels:
        raise InputError(f"base row {base!r} is not one of the runs {labels}")
    bdoc = dict(docs)[base]
    rows = []
    for label, doc in docs:
        vals, deltas, cis = {}, {}, {}
        for m in metrics:
            v, b = metric_value(doc, m), metric_value(bdoc, m)
            vals[m] = None if v is None else round(100 * v, 4)
            deltas[m] = None if (v is None or b is None or label == base) else round(100 * (v - b), 4)
            c = (doc.get(m) or {}).get("ci") if isinstance(doc.get(m), Mapping) else None
            cis[m] = None if not c or c[0] is None else [round(100 * c[0], 4), round(100 * c[1], 4)]
        rows.append({"label": label, "values": vals, "deltas": deltas, "ci": cis, "n": doc.get("n")})
    return {"base": base, "metrics": list(metrics), "rows": rows}


def ablation_markdown(table: Mapping[str, Any]) -> list[str]:
    """Table 3 layout: Rough (TPR, TNR, Balanced F1) | Meta-Verification (TPR, TNR, Balanced F1)."""
    short = {"tpr": "TPR", "tnr": "TNR", "balanced_f1": "Bal. F1"}
    ms = table["metrics"]
    head = "| Verifier | n | " + " | ".join(f"{m.split('.')[0].capitalize()} {short.get(m.split('.')[1], m)}"
                                            for m in ms) + " |"
    lines = [head, "|---|---:|" + "---:|" * len(ms)]
    for r in table["rows"]:
        cells = []
        for m in ms:
            v, d = r["values"][m], r["deltas"][m]
            if v is None:
                cells.append("—")
                continue
            s = f"{v:.1f}"
            if d is not None:
                s += f" {'▲' if d > 0 else '▼' if d < 0 else '='} {d:+.1f}"
            cells.append(s)
        lines.append(f"| {r['label']}{' (base)' if r['label'] == table['base'] else ''} | {r['n']} | "
                     + " | ".join(cells) + " |")
    return lines


def plot_ablation(docs: Sequence[tuple[str, Mapping[str, Any]]], path: str | os.PathLike,
                  title: str = "Ablation: TPR vs TNR") -> Path:
    """Every run's Rough (circle) and Meta-Verification (square) point on iso-F1 curves."""
    points = []
    for i, (label, doc) in enumerate(docs):
        points.append({"label": f"{label} (Rough)", "tpr": doc.get("rough.tpr"), "tnr": doc.get("rough.tnr"),
                       "marker": "o", "color": f"C{i}"})
        if "meta.tpr" in doc:
            points.append({"label": f"{label} (Meta)", "tpr": doc.get("meta.tpr"), "tnr": doc.get("meta.tnr"),
                           "marker": "s", "color": f"C{i}"})
    return plot_tpr_tnr(points, path, title)


@dataclass
class ReportConfig:
    """``python -m eval.report`` (mirrored by ``configs/report.yaml``)."""

    # run dirs (with metrics.json) or parents of run dirs: runs=[A,B] or runs=SWEEP_DIR or runs="A,B"
    runs: Any = field(default_factory=list)
    out: str = "???"
    base: str | None = None  # label of the base row (default: first run)
    labels: list[str] | None = None  # row labels (default: run directory names)
    title: str = "Ablation on the held-out verification set"
    wandb: WandbConfig = field(default_factory=ladder_wandb)  # the ladder's project; group: the runs' folder


def run(cfg: ReportConfig) -> dict[str, Any]:
    """The sweep report: ablation.md / ablation.json / ablation.png in ``out``."""
    runs = [r for r in cfg.runs.split(",") if r.strip()] if isinstance(cfg.runs, str) else list(cfg.runs or [])
    if not runs:
        raise InputError("runs is empty: pass runs=[DIR,...] (directories with metrics.json)")
    dirs = find_runs(runs)
    labels = list(cfg.labels) if cfg.labels else [d.name for d in dirs]
    if len(labels) != len(dirs):
        raise InputError(f"{len(labels)} labels for {len(dirs)} runs")
    if len(set(labels)) != len(labels):
        raise InputError(f"run labels are not unique: {labels} (pass labels=[...])")
    docs = [(lab, json.loads((d / "metrics.json").read_text(encoding="utf-8"))) for lab, d in zip(labels, dirs)]
    metrics = [m for m in HEADLINE if any(m in doc for _, doc in docs)]
    table = ablation_table(docs, cfg.base, metrics)
    table["runs"] = {lab: str(d) for lab, d in zip(labels, dirs)}
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    png = plot_ablation(docs, out / "ablation.png", cfg.title)
    md = [f"# {cfg.title}", "", "Values in %, deltas in points against the base row "
          f"(**{table['base']}**); ▲ better, ▼ worse.", ""] + ablation_markdown(table)
    md += ["", f"![ablation]({png.name})", "", "Runs: " + ", ".join(f"{k} = `{v}`" for k, v in table["runs"].items())]
    write_markdown(out, md, "ablation.md")
    write_metrics(out, table, "ablation.json")
    print("\n".join(ablation_markdown(table)))
    if cfg.wandb.enabled:  # the ladder's project and group: the one the rows' training runs logged to
        r = init_run(cfg.wandb, asdict(cfg), out, job_type="report", group=ladder_group(cfg.wandb, *dirs))
        try:
            log_table(r, "ablation", [{"label": row["label"], **{m: row["values"][m] for m in metrics},
                                       **{f"delta {m}": row["deltas"][m] for m in metrics}} for row in table["rows"]])
            log_images(r, [png])
        finally:
            r.finish()
    print(f"wrote {out / 'ablation.md'}")
    return table


def main() -> None:
    hydra_main("report", ReportConfig)(run)()


if __name__ == "__main__":
    main()
