"""Results: the one writer of metrics.json, Markdown reports, PNG plots and W&B runs (a leaf module).

Everything that evaluates or trains writes its results through here, so every command's output
looks the same and has one home (imports nothing from ``eval/`` or ``training/``):

* ``write_metrics(out, doc)`` - ``out/metrics.json`` (atomic; NaN-free JSON of the document).
* ``pct`` - the one percent formatter (a fraction or a ``{"value", "ci"}`` metric), ``ci_text``,
  ``md_table`` - the one Markdown table formatter, ``write_markdown``.
* Plots: ``figure`` / ``save_figure`` (Agg backend), ``plot_tpr_tnr`` (Figure 1 of AdvancedMathBench:
  TPR against TNR on iso-Balanced-F1 curves), ``plot_k_curve``, ``plot_acceptance`` (Table 1), ``plot_bars``.
* ``write_report(out, doc)`` - ``report.md`` + PNGs for a VerifierBench / ProverBench / score document
  (sections 5.2-5.4).
* W&B: ``WandbConfig``, ``ladder_wandb`` / ``ladder_group`` (the ladder's one project, one group per ladder),
  ``resolve_mode`` (offline unless a key is set), ``init_run``, ``flat_metrics``,
  ``log_metrics``, ``log_images``, ``log_table``, ``log_eval``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from verifier.config import redact

HEADLINE = ("rough.tpr", "rough.tnr", "rough.balanced_f1", "meta.tpr", "meta.tnr", "meta.balanced_f1")


@dataclass
class WandbConfig:
    """W&B of any command (the one W&B config: evaluations' and training's ``wandb.*``); offline unless
    WANDB_API_KEY is set and mode is not forced."""

    enabled: bool = True
    project: str = "proofverifier-eval"  # the ladder's commands (SFT, GRPO, eval.report): proofverifier-grpo
    entity: str | None = None
    group: str | None = None  # null: WANDB_RUN_GROUP; the ladder's commands: the ladder's folder (ladder_group)
    name: str | None = None  # training: default the experiment plus its overrides
    mode: str | None = None  # online | offline | disabled; null or auto: online with WANDB_API_KEY, else offline
    dir: str | None = None  # default: <out>/wandb (training: the run's output_dir)
    tags: list[str] = field(default_factory=list)


# the one W&B project of the Table 3 ladder's commands: training/sft.py, training/grpo.py, python -m eval.report
LADDER_WANDB_PROJECT = "proofverifier-grpo"


def ladder_wandb() -> WandbConfig:
    """The W&B default of the ladder's commands (SFT, GRPO training, ``eval.report``): one project, on (offline
    without WANDB_API_KEY: mode auto), the group the ladder's name (:func:`ladder_group`)."""
    return WandbConfig(enabled=True, project=LADDER_WANDB_PROJECT, mode="auto")


def ladder_group(wandb_cfg: Any, *run_dirs: str | os.PathLike) -> str:
    """The W&B group of a ladder's run: ``wandb.group``, else env WANDB_RUN_GROUP, else the ladder's name, the
    folder that holds the run directories (``sweep.sh``'s SWEEP_DIR: runs ``/scratch/sweep/<experiment>``, their
    report over ``runs=[/scratch/sweep]``: group ``sweep``).

    >>> import os; os.environ.pop("WANDB_RUN_GROUP", None) and None
    >>> ladder_group(None, "/s/sweep/base"), ladder_group(None, "/s/sweep/base", "/s/sweep/pos_aug")
    ('sweep', 'sweep')
    >>> ladder_group({"group": "mine"}, "/s/sweep/base")
    'mine'
    """
    explicit = _get(wandb_cfg, "group") or os.environ.get("WANDB_RUN_GROUP")
    if explicit:
        return str(explicit)
    parents = [os.path.dirname(os.path.abspath(d)) for d in run_dirs] or [os.getcwd()]
    return Path(os.path.commonpath(parents)).name or "ladder"


# --------------------------------------------------------------------------- metrics.json


def write_metrics(out: str | os.PathLike, doc: Mapping[str, Any], name: str = "metrics.json") -> Path:
    """``out/metrics.json`` written atomically (a reader never sees half a file); returns its path."""
    path = Path(out) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------- text


def pct(m: Any, ci: bool = True, digits: int = 1) -> str:
    """A fraction or a metric ``{"value", "ci"}`` as a percentage (with its CI), as in the paper's tables.

    >>> pct({"value": 0.8214, "ci": [0.7, 0.9]}), pct({"value": 0.8214, "ci": [0.7, 0.9]}, ci=False)
    ('82.1 [70.0, 90.0]', '82.1')
    >>> pct(0.5), pct(None), pct({"value": None, "ci": None})
    ('50.0', '—', '—')
    """
    if isinstance(m, Mapping):
        v, c = m.get("value"), m.get("ci")
    else:
        v, c = m, None
    if v is None:
        return "—"
    s = f"{100 * v:.{digits}f}"
    if ci and c and c[0] is not None:
        s += f" [{100 * c[0]:.{digits}f}, {100 * c[1]:.{digits}f}]"
    return s


def ci_text(m: Mapping[str, Any] | None, digits: int = 1) -> str:
    """The CI of a metric in percent, ``[lo, hi]`` (``—`` when undefined).

    >>> ci_text({"value": .5, "ci": [.4, .6]}), ci_text({"value": .5, "ci": [None, None]})
    ('[40.0, 60.0]', '—')
    """
    c = (m or {}).get("ci")
    return "—" if not c or c[0] is None else f"[{100 * c[0]:.{digits}f}, {100 * c[1]:.{digits}f}]"


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> list[str]:
    """A Markdown table as lines; ``align``: one of ``l``/``r`` per column (default: first left, rest right).

    >>> md_table(["a", "b"], [[1, None]])
    ['| a | b |', '|---|---:|', '| 1 | — |']
    """
    align = align or ("l" + "r" * (len(header) - 1))
    lines = ["| " + " | ".join(map(str, header)) + " |",
             "|" + "".join("---:|" if a == "r" else "---|" for a in align) + ""]
    for r in rows:
        lines.append("| " + " | ".join("—" if c is None else str(c) for c in r) + " |")
    return lines


def write_markdown(out: str | os.PathLike, lines: Sequence[str], name: str = "report.md") -> Path:
    """``out/report.md`` from lines (one trailing newline)."""
    path = Path(out) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    return path


SCORE_PREFIXES = ("rough.", "meta.", "processbench.")


def metric_names(doc: Mapping[str, Any], prefixes: Sequence[str] = SCORE_PREFIXES) -> list[str]:
    """The top-level metric keys (``{"value", "counts", ...}`` entries) of a document, in document order.

    >>> metric_names({"n": 3, "rough.tpr": {"value": 1.0, "counts": {}}, "acceptance": {}})
    ['rough.tpr']
    """
    return [k for k, v in doc.items() if isinstance(v, Mapping) and "value" in v and "counts" in v
            and k.startswith(tuple(prefixes))]


# --------------------------------------------------------------------------- plots


def _mpl():
    # lazy: matplotlib is slow to import and needs its backend set first; only plots use it
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(figsize: tuple[float, float] = (6.0, 3.6)):
    """A new (fig, ax) on the Agg backend."""
    return _mpl().subplots(figsize=figsize, dpi=120)


def save_figure(fig, path: str | os.PathLike) -> Path:
    """Save (tight layout) and close a figure; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path)
    _mpl().close(fig)
    return path


def plot_bars(labels: Sequence[str], values: Sequence[float | None], path: str | os.PathLike, ylabel: str = "%",
              title: str = "", colors: Sequence[str] | None = None, ylim: tuple[float, float] | None = (0, 100),
              hlines: Sequence[tuple[float, str, str]] = (), band: tuple[float, float] | None = None) -> Path:
    """Bars of percentages (fractions in, % drawn); ``hlines``: (fraction, style, label); ``band``: a shaded CI."""
    fig, ax = figure((max(4.5, 0.8 * len(labels) + 2.5), 3.4))
    ax.bar(range(len(values)), [0.0 if v is None else 100 * v for v in values],
           color=list(colors) if colors else "C0", alpha=0.8)
    ax.set_xticks(range(len(values)), list(labels), rotation=20 if len(labels) > 3 else 0, ha="right", fontsize=8)
    for y, style, lab in hlines:
        ax.axhline(100 * y, ls=style, color="C3" if style == "-" else "gray", lw=1, label=lab)
    if band is not None:
        ax.axhspan(100 * band[0], 100 * band[1], color="C3", alpha=0.15, label="95% CI")
    if hlines or band is not None:
        ax.legend(fontsize=7)
    if ylim:
        ax.set_ylim(*ylim)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    return save_figure(fig, path)


def metric_value(doc: Mapping[str, Any], key: str) -> float | None:
    """The value of metric ``key`` in a document (None when absent or undefined)."""
    m = doc.get(key)
    return None if not isinstance(m, Mapping) else m.get("value")


def _err(m: Mapping[str, Any] | None) -> tuple[float, float] | None:
    if not m or m.get("value") is None or not m.get("ci") or m["ci"][0] is None:
        return None
    return m["value"] - m["ci"][0], m["ci"][1] - m["value"]


def iso_f1_curves(ax, levels: Sequence[float] = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)) -> None:
    """Draw Balanced-F1 iso-lines in TPR-TNR space (in %): TNR = F·TPR / (2·TPR - F)."""

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
    return save_figure(fig, path)


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
    return save_figure(fig, path)


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
    return save_figure(fig, path)


# --------------------------------------------------------------------------- Markdown


def _metric_rows(doc: Mapping[str, Any]) -> list[str]:
    return md_table(["metric", "value %", "95% CI", "counts"],
                    ([f"`{name}`", pct(doc[name], ci=False), ci_text(doc[name]),
                      ", ".join(f"{k}={v}" for k, v in doc[name]["counts"].items())] for name in metric_names(doc)),
                    align="lrrl")


def print_table(doc: Mapping[str, Any], title: str = "VerifierBench scores") -> None:
    """Headline metrics of a score document as a rich table (percentages with CIs and counts)."""

    level = round(100 * (doc.get("bootstrap") or {}).get("level", 0.95))
    t = Table(title=f"{title} (n={doc.get('n')}, {level}% CI over problems)")
    for col, just in (("metric", "left"), ("value %", "right"), (f"{level}% CI", "right"), ("counts", "left")):
        t.add_column(col, justify=just)
    for name in metric_names(doc):
        m = doc[name]
        t.add_row(name, pct(m, ci=False), ci_text(m), " ".join(f"{k}={v}" for k, v in m["counts"].items()))
    Console(width=120).print(t)
    ids = doc.get("ids") or {}
    if ids.get("missing_predictions") or ids.get("unknown_predictions"):
        print(f"ids: {len(ids['missing_predictions'])} gold id(s) without a prediction, "
              f"{len(ids['unknown_predictions'])} prediction id(s) not in gold (allow_missing=true)")


def _breakdown_rows(groups: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    return md_table(["group", "n", *names],
                    ([key, g["n"], *(pct(g["metrics"].get(n)) for n in names)] for key, g in groups.items()))


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
                  (f"A proof is accepted only if all {doc.get('passes', '?')} verification passes accept it "
                  "(section 4.4)."), ""]
        lines += md_table(["split", "accepted %", "95% CI", "accepted / n"],
                          ([key, pct(m, ci=False), ci_text(m), f"{m['counts']['accepted']}/{m['counts']['n']}"]
                           for key, m in [("overall", acc["overall"])] + list((acc.get("split") or {}).items())))
        if acc.get("subject"):
            lines += ["", "### By subject", ""]
            lines += md_table(["subject", "accepted % [95% CI]", "accepted / n"],
                              ([key, pct(m), f"{m['counts']['accepted']}/{m['counts']['n']}"]
                               for key, m in acc["subject"].items()))
        png = plot_acceptance(acc, out / "acceptance.png")
        lines += ["", f"![acceptance by split]({png.name})", ""]
    if metric_names(doc):
        lines += ["## VerifierBench scores", "",
                  (f"n = {doc.get('n')} proofs; intervals: {int(100 * bs.get('level', 0.95))}% bootstrap over "
                  f"{bs.get('cluster', 'problem_id')} ({bs.get('n')} replicates, seed {bs.get('seed')}). "
                  "Rough = validity polarity only; Meta-Verification = polarity right AND meta-verifier grade "
                  f">= {doc.get('meta_threshold') or 'BASIC_MATCH'}."), ""]
        lines += _metric_rows(doc)
        points = [{"label": "Rough", "tpr": doc.get("rough.tpr"), "tnr": doc.get("rough.tnr"), "marker": "o"}]
        if "meta.tpr" in doc:
            points.append({"label": "Meta-Verification", "tpr": doc["meta.tpr"], "tnr": doc["meta.tnr"],
                           "marker": "s"})
        png = plot_tpr_tnr(points, out / "tpr_tnr.png")
        lines += ["", f"![TPR vs TNR with iso-Balanced-F1 curves]({png.name})", ""]
    counts = doc.get("counts") or {}
    if counts:
        lines += ["## Counts", ""] + md_table(["", "n"], counts.items()) + [""]
    ids = doc.get("ids") or {}
    if ids.get("missing_predictions") or ids.get("unknown_predictions"):
        lines += [(f"**Ids not scored (allow_missing):** {len(ids['missing_predictions'])} gold id(s) without a "
                  f"prediction, {len(ids['unknown_predictions'])} prediction id(s) not in gold. First: "
                  f"{(ids['missing_predictions'] + ids['unknown_predictions'])[:5]}"), ""]
    names = [n for n in HEADLINE if n in doc] or metric_names(doc)
    for fld, groups in (doc.get("breakdowns") or {}).items():
        if groups:
            lines += [f"## By {fld}", ""] + _breakdown_rows(groups, names) + [""]
    if doc.get("flip"):
        f = doc["flip"]
        lines += ["## Judge noise across passes (ProofJudge-style)", "",
                  f"- pairwise flip rate: {pct(f['pairwise'])} ({f['pairwise']['counts']})",
                  f"- proofs whose passes disagree: {pct(f['unstable'])} ({f['unstable']['counts']})", ""]
    if doc.get("k_curve"):
        png = plot_k_curve(doc["k_curve"], out / "k_curve.png")
        has_m = bool(doc["k_curve"][0].get("metrics"))
        mcols = ["rough.tpr", "rough.tnr", "rough.balanced_f1"] if has_m else []
        lines += ["## k-curve (pessimistic acceptance over the first k passes)", ""]
        lines += md_table(["policy", "k", "acceptance %", *mcols],
                          ([r["policy"], r["k"], pct(r["acceptance"]),
                            *(pct(r["metrics"][n]) for n in mcols if r.get("metrics"))] for r in doc["k_curve"]))
        lines += ["", f"![k-curve]({png.name})", ""]
    lines += list(extra)
    return write_markdown(out, lines)



# --------------------------------------------------------------------------- W&B


def resolve_mode(mode: str | None = None) -> str:
    """online / offline / disabled.

    >>> resolve_mode("disabled")
    'disabled'
    >>> import os; os.environ.pop("WANDB_MODE", None) and None; resolve_mode("auto") == resolve_mode(None)
    True
    """
    if mode and mode != "auto":
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


def init_run(wandb_cfg: Any, config: Any, out_dir: str | os.PathLike, job_type: str = "eval",
             group: str | None = None, *, name: str | None = None, tags: Sequence[str] = (),
             run_id: str | None = None, mode: str | None = None, console: bool = False):
    """Start a W&B run: the one place a run of any command starts (evaluations, ``eval.report``, SFT and GRPO
    training through ``training.tracking.start_run``).

    ``wandb_cfg``: any object or dict with project/entity/group/name/mode/dir/tags; ``group`` wins over its
    ``group``; ``name`` is the default when it names none; ``tags`` are added to its tags; ``mode`` wins over its
    mode (else ``resolve_mode``: offline without WANDB_API_KEY). ``config`` (a mapping or a dataclass) and the
    name are redacted: no API key reaches W&B. ``run_id``: the run to continue (a resumed training run).
    ``console``: W&B captures the console and prints its own lines (training); off for evaluations."""
    # lazy: wandb takes seconds to import; only a run that logs needs it
    import wandb

    d = Path(_get(wandb_cfg, "dir") or Path(out_dir))
    d.mkdir(parents=True, exist_ok=True)
    run_name = _get(wandb_cfg, "name") or name
    kwargs: dict[str, Any] = dict(
        project=_get(wandb_cfg, "project", "proofverifier"),
        entity=_get(wandb_cfg, "entity"),
        group=group or _get(wandb_cfg, "group"),
        name=None if run_name is None else redact(str(run_name)),
        tags=list(_get(wandb_cfg, "tags") or []) + list(tags),
        mode=mode or resolve_mode(_get(wandb_cfg, "mode")),
        dir=str(d),
        job_type=job_type,
        config=redact(config if is_dataclass(config) else dict(config or {})),  # no API key reaches W&B
        reinit="finish_previous",
    )
    if run_id is not None:
        kwargs.update(id=run_id, resume="allow")
    if not console:
        kwargs["settings"] = wandb.Settings(silent=True, console="off")
    return wandb.init(**kwargs)


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
    # lazy: wandb takes seconds to import; only a run that logs needs it
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
    # lazy: wandb takes seconds to import; only a run that logs needs it
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
