"""Reports: Markdown next to metrics.json, PNG plots, and Table-3-style ablation tables.

* ``write_report(out, doc)`` - ``report.md`` with the headline table (percentages with
  95% CIs and counts), breakdowns by split and subject, judge noise, and the plots:
  ``tpr_tnr.png`` (TPR against TNR with iso-Balanced-F1 curves, as Figure 1 of
  AdvancedMathBench) and ``k_curve.png`` (pessimistic acceptance and metrics at k = 1..n).
* ``python -m eval.report runs=[DIR,...] out=DIR [base=LABEL]`` - the ablation table of
  section 5.4 / Table 3: one row per run (a directory with ``metrics.json``), Rough and
  Meta-Verification TPR / TNR / Balanced F1 with deltas against the base row (▲ / ▼),
  ``ablation.md``, ``ablation.json`` and ``ablation.png``.

``browser_index`` (optional) is the path of the judgment browser page (``eval.browse``);
when given, the report links it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from eval.metrics import METRICS, fmt_pct
from eval.score import WandbConfig

HEADLINE = ("rough.tpr", "rough.tnr", "rough.balanced_f1", "meta.tpr", "meta.tnr", "meta.balanced_f1")


def _mpl():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _val(doc: Mapping[str, Any], key: str) -> float | None:
    m = doc.get(key)
    return None if not isinstance(m, Mapping) else m.get("value")


def _err(m: Mapping[str, Any] | None) -> tuple[float, float] | None:
    if not m or m.get("value") is None or not m.get("ci") or m["ci"][0] is None:
        return None
    return m["value"] - m["ci"][0], m["ci"][1] - m["value"]


def iso_f1_curves(ax, levels: Sequence[float] = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)) -> None:
    """Draw Balanced-F1 iso-lines in TPR-TNR space (in %): TNR = F·TPR / (2·TPR - F)."""
    import numpy as np

    for f in levels:
        x = np.linspace(f / 2 + 1e-6, 1.0, 300)
        y = f * x / (2 * x - f)
        ok = (y >= 0) & (y <= 1.0)
        ax.plot(100 * x[ok], 100 * y[ok], color="0.8", lw=0.8, ls="--", zorder=0)
        i = int(np.argmin(np.abs(x[ok] - y[ok])))  # label near the diagonal
        ax.annotate(f"F1={f:.1f}", (100 * x[ok][i], 100 * y[ok][i]), fontsize=7, color="0.5",
                    xytext=(2, 2), textcoords="offset points")


def plot_tpr_tnr(points: Sequence[Mapping[str, Any]], path: str | os.PathLike,
                 title: str = "VerifierBench: TPR vs TNR") -> Path:
    """Scatter of (TPR, TNR) with CI error bars on iso-Balanced-F1 curves (Figure 1, right).

    ``points``: ``{"label", "tpr": metric, "tnr": metric, "marker"}`` with metric dicts
    ``{"value", "ci"}``; a point whose TPR or TNR is undefined is skipped.
    """
    plt = _mpl()
    fig, ax = plt.subplots(figsize=(5.6, 5.0), dpi=120)
    iso_f1_curves(ax)
    drawn = 0
    for i, p in enumerate(points):
        tpr, tnr = p["tpr"], p["tnr"]
        if not tpr or not tnr or tpr.get("value") is None or tnr.get("value") is None:
            continue
        drawn += 1
        ex, ey = _err(tpr), _err(tnr)
        ax.errorbar(100 * tpr["value"], 100 * tnr["value"],
                    xerr=None if ex is None else [[100 * ex[0]], [100 * ex[1]]],
                    yerr=None if ey is None else [[100 * ey[0]], [100 * ey[1]]],
                    fmt=p.get("marker", "o"), ms=7, capsize=3, color=p.get("color", f"C{i}"), label=p["label"])
    ax.set_xlim(0, 102)
    ax.set_ylim(0, 102)
    ax.set_xlabel("TPR (valid proofs judged valid, %)")
    ax.set_ylabel("TNR (invalid proofs judged invalid, %)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.2)
    if drawn:
        ax.legend(fontsize=7, loc="lower left")
    else:
        ax.text(50, 50, "TPR or TNR undefined (no valid or no invalid proofs)", ha="center", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_k_curve(curve: Sequence[Mapping[str, Any]], path: str | os.PathLike,
                 title: str = "Pessimistic verification: k passes") -> Path:
    """Acceptance (and Rough TPR / TNR / Balanced F1 when gold exists) against k, with CI bands."""
    plt = _mpl()
    pess = [r for r in curve if r["policy"] == "pessimistic"]
    maj = [r for r in curve if r["policy"] == "majority"]
    fig, ax = plt.subplots(figsize=(6.0, 4.2), dpi=120)
    ks = [r["k"] for r in pess]
    series = [("acceptance", lambda r: r["acceptance"], "k")]
    if pess and pess[0].get("metrics"):
        series += [(name, (lambda r, n=name: r["metrics"][n]), c)
                   for name, c in (("rough.tpr", "C0"), ("rough.tnr", "C3"), ("rough.balanced_f1", "C2"))]
    for label, get, color in series:
        ys = [get(r).get("value") for r in pess]
        if all(y is None for y in ys):
            continue
        ax.plot(ks, [None if y is None else 100 * y for y in ys], marker="o", color=color, label=label)
        lo = [get(r)["ci"][0] if get(r).get("ci") and get(r)["ci"][0] is not None else None for r in pess]
        hi = [get(r)["ci"][1] if get(r).get("ci") and get(r)["ci"][1] is not None else None for r in pess]
        if all(v is not None for v in lo + hi):
            ax.fill_between(ks, [100 * v for v in lo], [100 * v for v in hi], color=color, alpha=0.12)
        for r in maj:
            y = get(r).get("value")
            if y is not None:
                ax.scatter([r["k"] + 0.15], [100 * y], marker="D", color=color, edgecolor="black", zorder=3,
                           label=f"{label} (majority of {r['k']})")
    ax.set_xlabel("k (accept only if all of the first k passes accept)")
    ax.set_ylabel("%")
    ax.set_ylim(-2, 102)
    if ks:
        ax.set_xticks(ks)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.2)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_acceptance(table: Mapping[str, Any], path: str | os.PathLike, field_name: str = "split",
                    title: str = "ProverBench: pessimistic acceptance") -> Path:
    """Bar chart of acceptance by split (Table 1) with CI whiskers."""
    plt = _mpl()
    groups = table.get(field_name) or {}
    labels = ["overall"] + list(groups)
    ms = [table["overall"]] + [groups[k] for k in groups]
    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(labels) + 2), 3.8), dpi=120)
    vals = [100 * (m["value"] or 0.0) for m in ms]
    errs = [_err(m) or (0.0, 0.0) for m in ms]
    ax.bar(labels, vals, yerr=[[100 * e[0] for e in errs], [100 * e[1] for e in errs]], capsize=3,
           color=["0.4"] + [f"C{i}" for i in range(len(groups))])
    for i, m in enumerate(ms):
        top = vals[i] + 100 * errs[i][1]  # above the whisker
        ax.annotate(f"{m['counts']['accepted']}/{m['counts']['n']}", (i, top), ha="center", fontsize=7,
                    xytext=(0, 3), textcoords="offset points")
    ax.set_ylim(0, 105)
    ax.set_ylabel("accepted proofs (%)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- Markdown


def _metric_rows(doc: Mapping[str, Any]) -> list[str]:
    lines = ["| metric | value % | 95% CI | counts |", "|---|---:|---:|---|"]
    for name in METRICS:
        if name in doc:
            m = doc[name]
            ci = m.get("ci")
            ci_s = "—" if not ci or ci[0] is None else f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"
            counts = ", ".join(f"{k}={v}" for k, v in m["counts"].items())
            lines.append(f"| `{name}` | {fmt_pct(m, ci=False)} | {ci_s} | {counts} |")
    return lines


def _breakdown_rows(groups: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    head = "| group | n | " + " | ".join(n for n in names) + " |"
    lines = [head, "|---|---:|" + "---:|" * len(names)]
    for key, g in groups.items():
        lines.append(f"| {key} | {g['n']} | " + " | ".join(fmt_pct(g["metrics"].get(n)) for n in names) + " |")
    return lines


def write_report(out: str | os.PathLike, doc: Mapping[str, Any], title: str = "Evaluation report",
                 browser_index: str | os.PathLike | None = None, extra: Sequence[str] = ()) -> Path:
    """``out/report.md`` plus PNG plots, from a metrics.json document (VerifierBench or ProverBench)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", ""]
    bs = doc.get("bootstrap") or {}
    if browser_index:
        rel = os.path.relpath(Path(browser_index).resolve(), out.resolve())
        lines += [f"**Browse every judgment:** [{Path(browser_index).name}]({rel})", ""]
    inputs = doc.get("inputs") or {}
    if inputs:
        lines += ["Inputs: " + ", ".join(f"{k} `{v}`" for k, v in inputs.items()), ""]
    if "acceptance" in doc:  # ProverBench
        acc = doc["acceptance"]
        lines += ["## ProverBench: pessimistic acceptance (Table 1)", "",
                  f"A proof is accepted only if all {doc.get('passes', '?')} verification passes accept it "
                  "(section 4.4).", "", "| split | accepted % | 95% CI | accepted / n |", "|---|---:|---:|---:|"]
        for key, m in [("overall", acc["overall"])] + list((acc.get("split") or {}).items()):
            ci = m.get("ci")
            ci_s = "—" if not ci or ci[0] is None else f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"
            lines.append(f"| {key} | {fmt_pct(m, ci=False)} | {ci_s} | {m['counts']['accepted']}/{m['counts']['n']} |")
        if acc.get("subject"):
            lines += ["", "### By subject", "", "| subject | accepted % [95% CI] | accepted / n |", "|---|---:|---:|"]
            for key, m in acc["subject"].items():
                lines.append(f"| {key} | {fmt_pct(m)} | {m['counts']['accepted']}/{m['counts']['n']} |")
        png = plot_acceptance(acc, out / "acceptance.png")
        lines += ["", f"![acceptance by split]({png.name})", ""]
    if any(k in doc for k in METRICS):
        lines += ["## VerifierBench scores", "",
                  f"n = {doc.get('n')} proofs; intervals: {int(100 * bs.get('level', 0.95))}% bootstrap over "
                  f"{bs.get('cluster', 'problem_id')} ({bs.get('n')} replicates, seed {bs.get('seed')}). "
                  "Rough = validity polarity only; Meta-Verification = polarity right AND meta-verifier grade "
                  f">= {doc.get('meta_threshold') or 'BASIC_MATCH'}.", ""]
        lines += _metric_rows(doc)
        points = [{"label": "Rough", "tpr": doc.get("rough.tpr"), "tnr": doc.get("rough.tnr"), "marker": "o"}]
        if "meta.tpr" in doc:
            points.append({"label": "Meta-Verification", "tpr": doc["meta.tpr"], "tnr": doc["meta.tnr"],
                           "marker": "s"})
        png = plot_tpr_tnr(points, out / "tpr_tnr.png")
        lines += ["", f"![TPR vs TNR with iso-Balanced-F1 curves]({png.name})", ""]
    counts = doc.get("counts") or {}
    if counts:
        lines += ["## Counts", "", "| | n |", "|---|---:|"]
        lines += [f"| {k} | {v} |" for k, v in counts.items()]
        lines.append("")
    ids = doc.get("ids") or {}
    if ids.get("missing_predictions") or ids.get("unknown_predictions"):
        lines += [f"**Ids not scored (allow_missing):** {len(ids['missing_predictions'])} gold id(s) without a "
                  f"prediction, {len(ids['unknown_predictions'])} prediction id(s) not in gold. First: "
                  f"{(ids['missing_predictions'] + ids['unknown_predictions'])[:5]}", ""]
    names = [n for n in HEADLINE if n in doc] or [n for n in METRICS if n in doc]
    for fld, groups in (doc.get("breakdowns") or {}).items():
        if groups:
            lines += [f"## By {fld}", ""] + _breakdown_rows(groups, names) + [""]
    if doc.get("flip"):
        f = doc["flip"]
        lines += ["## Judge noise across passes (ProofJudge-style)", "",
                  f"- pairwise flip rate: {fmt_pct(f['pairwise'])} ({f['pairwise']['counts']})",
                  f"- proofs whose passes disagree: {fmt_pct(f['unstable'])} ({f['unstable']['counts']})", ""]
    if doc.get("k_curve"):
        png = plot_k_curve(doc["k_curve"], out / "k_curve.png")
        has_m = bool(doc["k_curve"][0].get("metrics"))
        mcols = ["rough.tpr", "rough.tnr", "rough.balanced_f1"] if has_m else []
        lines += ["## k-curve (pessimistic acceptance over the first k passes)", "",
                  "| " + " | ".join(["policy", "k", "acceptance %"] + mcols) + " |",
                  "|---|---:|---:|" + "---:|" * len(mcols)]
        for r in doc["k_curve"]:
            cells = [r["policy"], str(r["k"]), fmt_pct(r["acceptance"])]
            if r.get("metrics"):
                cells += [fmt_pct(r["metrics"][n]) for n in ("rough.tpr", "rough.tnr", "rough.balanced_f1")]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", f"![k-curve]({png.name})", ""]
    lines += list(extra)
    path = out / "report.md"
    path.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    return path


# --------------------------------------------------------------------------- ablation sweeps


def find_runs(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Run directories: each path that holds metrics.json, or its subdirectories that do (sorted)."""
    runs: list[Path] = []
    for p in map(Path, paths):
        if (p / "metrics.json").exists():
            runs.append(p)
        elif p.is_dir():
            subs = sorted(d for d in p.iterdir() if (d / "metrics.json").exists())
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
        raise ValueError(f"base row {base!r} is not one of the runs {labels}")
    bdoc = dict(docs)[base]
    rows = []
    for label, doc in docs:
        vals, deltas, cis = {}, {}, {}
        for m in metrics:
            v, b = _val(doc, m), _val(bdoc, m)
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
    wandb: WandbConfig = field(default_factory=lambda: WandbConfig(enabled=False))


def run(cfg: ReportConfig) -> dict[str, Any]:
    """The sweep report: ablation.md / ablation.json / ablation.png in ``out``."""
    runs = [r for r in cfg.runs.split(",") if r.strip()] if isinstance(cfg.runs, str) else list(cfg.runs or [])
    if not runs:
        raise ValueError("runs is empty: pass runs=[DIR,...] (directories with metrics.json)")
    dirs = find_runs(runs)
    labels = list(cfg.labels) if cfg.labels else [d.name for d in dirs]
    if len(labels) != len(dirs):
        raise ValueError(f"{len(labels)} labels for {len(dirs)} runs")
    if len(set(labels)) != len(labels):
        raise ValueError(f"run labels are not unique: {labels} (pass labels=[...])")
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
    (out / "ablation.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    (out / "ablation.json").write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
    print("\n".join(ablation_markdown(table)))
    if cfg.wandb.enabled:
        from dataclasses import asdict

        from eval.wandb_log import init_run, log_images, log_table

        r = init_run(cfg.wandb, asdict(cfg), out, job_type="report")
        try:
            log_table(r, "ablation", [{"label": row["label"], **{m: row["values"][m] for m in metrics},
                                       **{f"delta {m}": row["deltas"][m] for m in metrics}} for row in table["rows"]])
            log_images(r, [png])
        finally:
            r.finish()
    print(f"wrote {out / 'ablation.md'}")
    return table


def main() -> None:
    from verifier.config import hydra_main

    hydra_main("report", ReportConfig)(run)()


if __name__ == "__main__":
    main()
