"""The report of `make bench-ladder`: Table 3's rows on held-out prover proofs, the pre-registered tests, the plot and
the values of the last line (``bench/bench_ladder.py`` prints it).

Rows 1-5 (base, rough_rl, meta_ver_rl, extra_ann, pos_aug) and extra_ann_random are scored per pass (each of the 8
held-out passes as one verification: the paper's single-verification protocol, averaged); pess_ver is pos_aug's
weights scored by the 8-pass pessimistic decision (section 4.4). Metric differences resample problems and the
training seed pairs (``eval.metrics.metric_deltas`` on ``eval.stats.paired_bootstrap``, paired seeds: seed k of every row shares its
sampling seed); against base (one warm start) the seeds of the other row are resampled alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from eval.metrics import COLUMNS, metric_deltas
from eval.record_rows import METRICS, pooled_metrics, step_rows
from eval.stats import BootstrapSpec
from verifier.io import load_trajectories
from verifier.judgment import load_judgments

TABLE = ("base", "rough_rl", "meta_ver_rl", "extra_ann", "pos_aug", "pess_ver", "extra_ann_random")
TESTS = {  # name: (row A, row B, metric): the section-5.4 claims, registered in reports/table3_prover_proofs.md
    "meta_vs_rough": ("meta_ver_rl", "rough_rl", "meta.balanced_f1"),
    "extra_ann_tnr": ("extra_ann", "meta_ver_rl", "meta.tnr"),
    "extra_ann_tpr": ("extra_ann", "meta_ver_rl", "meta.tpr"),
    "pos_aug_tpr": ("pos_aug", "extra_ann", "meta.tpr"),
    "pess_tnr": ("pess_ver", "pos_aug", "meta.tnr"),
    "final_vs_base": ("pess_ver", "base", "meta.balanced_f1"),
    "selection_vs_random": ("extra_ann", "extra_ann_random", "meta.balanced_f1"),
}


def false_accept(gold, rows: list[np.ndarray]) -> float:
    """Share of the verifications of false held-out proofs that accept, pooled over seeds (and passes)."""
    neg = np.array([not t.annotation.is_valid for t in gold])
    acc = sum(r[neg, COLUMNS.index("accept")].sum() for r in rows)
    n = sum(r[neg, COLUMNS.index("neg")].sum() for r in rows)
    return float(acc / n) if n else float("nan")


def row_counts(out: Path, gold, names: list[str]) -> dict[str, list[dict[str, np.ndarray]]]:
    """Per row: one ``step_rows`` dict (``per_pass`` and ``earliest`` = the 8-pass decision) per seed."""
    runs: dict[str, list[dict[str, np.ndarray]]] = {}
    for n in names:
        row = n.partition("/")[0]
        runs.setdefault(row, []).append(step_rows(gold, load_judgments(out / "rows" / n / "heldout" /
                                                                      "judgments.jsonl")))
    return runs


def report(out: Path, cfg: Any, names: list[str], cand: dict[str, Any]) -> dict[str, Any]:
    """Write OUT/report.{json,md} and OUT/ladder.png, print the markdown; the report (``line_values`` of it: the
    bench's last line)."""
    gold = load_trajectories(out / "grpo_data" / "data" / "held_out.jsonl").records
    runs = row_counts(out, gold, names)
    per = {r: [x["per_pass"] for x in v] for r, v in runs.items()}
    per["pess_ver"] = [x["earliest"] for x in runs["pos_aug"]]
    spec = BootstrapSpec(n=cfg.bootstrap_n, seed=cfg.seed)
    table = {r: {k: v for k, v in pooled_metrics(gold, per[r], spec).items() if k in METRICS} for r in TABLE}
    tests = {}
    for name, (a, b, metric) in TESTS.items():
        paired = len(per[a]) == len(per[b])
        d = metric_deltas(per[a], per[b], [t.problem_id for t in gold], spec, paired_seeds=paired)
        tests[name] = {"rows": [a, b], "metric": metric, "delta": d[metric][0], "ci": list(d[metric][1:]),
                       "all": {k: list(v) for k, v in d.items()}, "seeds": "paired" if paired else "independent"}
    fa = {"base_per_pass": false_accept(gold, per["base"]), "base_8pass": false_accept(gold, [x["earliest"] for x in
                                                                                           runs["base"]]),
          "final_per_pass": false_accept(gold, per["pos_aug"]), "final_8pass": false_accept(gold, per["pess_ver"])}
    doc = {"config": vars(cfg) if not hasattr(cfg, "__dataclass_fields__") else
           {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
           "held_out": {"proofs": len(gold), "false": sum(not t.annotation.is_valid for t in gold),
                        "problems": len({t.problem_id for t in gold})},
           "candidates": cand, "table": table, "tests": tests, "false_accept": fa,
           "per_seed_meta_bf1": {r: [pooled_metrics(gold, [x], None)["meta.balanced_f1"]["value"] for x in per[r]]
                                 for r in TABLE}}
    (out / "report.json").write_text(json.dumps(doc, indent=1, default=str))
    md = markdown(doc)
    (out / "report.md").write_text(md)
    plot(doc, out / "ladder.png")
    print(md)
    return doc


def _n(v: float | None) -> float:
    return float("nan") if v is None else float(v)


def _p(v: float | None) -> str:
    return "n/a" if v is None or v != v else f"{100 * v:.1f}"


def markdown(doc: dict[str, Any]) -> str:
    h = doc["held_out"]
    lines = ["# bench-ladder: Table 3 on held-out prover proofs", "",
             f"Held-out: {h['proofs']} prover proofs ({h['false']} false) on {h['problems']} problems in no training "
             "set, labelled by the exact checker. Rows 1-5 scored per pass, pess_ver by 8 pessimistic passes. "
             "95% CIs clustered by problem (and seeds).", "",
             "| row | " + " | ".join(METRICS) + " | Δ Meta BF1 vs base |", "|---" * (len(METRICS) + 2) + "|"]
    base = doc["table"]["base"]["meta.balanced_f1"]["value"]
    for r, m in doc["table"].items():
        cells = [f"{_p(m[k]['value'])} [{_p((m[k]['ci'] or [None])[0])}, {_p((m[k]['ci'] or [None, None])[1])}]"
                 for k in METRICS]
        lines.append(f"| {r} | " + " | ".join(cells) + f" | {100 * (_n(m['meta.balanced_f1']['value']) - _n(base)):+.1f} |")
    lines += ["", "Pre-registered tests (reports/table3_prover_proofs.md), A - B in points:", "",
              "| test | A - B | metric | delta [95% CI] | seeds |", "|---|---|---|---|---|"]
    for name, t in doc["tests"].items():
        lines.append(f"| {name} | {t['rows'][0]} - {t['rows'][1]} | {t['metric']} | {100 * _n(t['delta']):+.1f} "
                     f"[{100 * _n(t['ci'][0]):+.1f}, {100 * _n(t['ci'][1]):+.1f}] | {t['seeds']} |")
    fa = doc["false_accept"]
    lines += ["", f"False prover proofs accepted: base {_p(fa['base_per_pass'])}% per pass / {_p(fa['base_8pass'])}% "
              f"with 8 pessimistic passes; final (pos_aug weights) {_p(fa['final_per_pass'])}% per pass / "
              f"{_p(fa['final_8pass'])}% with 8 passes.", "", "Candidate proofs per generator (pool):", "",
              "| generator | proofs | true % | first error kinds |", "|---|---:|---:|---|"]
    for g, m in doc["candidates"]["pool"]["error_mix"].items():
        lines.append(f"| {g} | {m['n']} | {_p(m['true_rate'])} | {m['kinds']} |")
    return "\n".join(lines) + "\n"


def plot(doc: dict[str, Any], path: Path) -> None:
    from verifier.results import figure, save_figure

    fig, ax = figure((9.0, 3.8))
    names = list(doc["table"])
    for k, (key, lab) in enumerate((("meta.tpr", "Meta TPR"), ("meta.tnr", "Meta TNR"),
                                    ("meta.balanced_f1", "Meta BF1"))):
        vals = [100 * _n(doc["table"][n][key]["value"]) for n in names]
        ax.bar([i + 0.27 * (k - 1) for i in range(len(names))], vals, width=0.27, label=lab, color=f"C{k}")
    ax.set_xticks(range(len(names)), names, fontsize=7)
    ax.set_ylim(0, 100)
    ax.set_ylabel("held-out prover proofs, %")
    ax.legend(fontsize=7)
    save_figure(fig, path)


def line_values(doc: dict[str, Any]) -> dict[str, float]:
    """The values of ``make bench-ladder``'s last line, in its order."""
    t, fa = doc["tests"], doc["false_accept"]

    def pair(name: str) -> tuple[float, float]:
        return _n(t[name]["delta"]), _n(t[name]["ci"][0])

    m, e, pa, pe, f, s = (pair(n) for n in ("meta_vs_rough", "extra_ann_tnr", "pos_aug_tpr", "pess_tnr",
                                            "final_vs_base", "selection_vs_random"))
    return {"meta_vs_rough_meta_f1": m[0], "meta_vs_rough_ci_low": m[1], "extra_ann_meta_tnr_delta": e[0],
            "extra_ann_ci_low": e[1], "pos_aug_tpr_delta": pa[0], "pos_aug_ci_low": pa[1], "pess_tnr_delta": pe[0],
            "pess_ci_low": pe[1], "final_vs_base_meta_f1": f[0], "final_vs_base_ci_low": f[1],
            "selection_vs_random_meta_f1": s[0], "selection_vs_random_ci_low": s[1],
            "false_accept_base": fa["base_per_pass"], "false_accept_final": fa["final_8pass"]}
