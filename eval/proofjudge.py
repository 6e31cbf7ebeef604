"""ProofJudge rubric judging and pairwise alignment (Caldwell 2026, sections 2.1 and 3).

``python -m eval.proofjudge input=PATH out=DIR endpoint.base_url=URL endpoint.model=NAME``

* Rubric scoring: the judge scores each configured dimension independently on a 1-10 scale
  (default: the paper's five - library leverage, automation fit, structural clarity,
  statement quality, Mathlib conventions); the harness weights them into a final score.
* Pairwise alignment: each revision of a pair is scored independently (the judge never
  sees the other one), ``replicates`` times each. A (pair, replicate) is aligned when the
  accepted revision scores above the rejected one (ties are not aligned, ``ties=loss``;
  ``ties=half`` counts 1/2). Reported: alignment % with a bootstrap CI clustered over items
  and replicates, a sign-test p-value over items (per-item majority; ties dropped) and one
  per replicate, and the verdict flip rate across replicates (judge noise).
* ``verifier_rows=PATH`` adds the same noise statistics for our own verifier's passes
  (``eval.judge`` output rows) to the report (``eval.stats.pass_noise``).

Input JSONL: ``id``, ``statement``, ``accepted`` (the revision the library merged),
``rejected`` (the one sent back), optional ``context``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.judges.core import Judge
from eval.stats import BootstrapSpec, flip_rate, pass_noise, sign_test, two_level_bootstrap_ci
from verifier.config import EndpointConfig, hydra_main
from verifier.errors import InputError
from verifier.io import load_rows, read_jsonl, write_jsonl
from verifier.judging import JudgeConfig
from verifier.parser import _clean_key
from verifier.records import RecordError
from verifier.results import md_table, pct, plot_bars, write_markdown, write_metrics

JUDGMENTS = "proofjudge_judgments.jsonl"  # its rows in out, named for the judge (not judgments.jsonl)


@dataclass
class Dimension:
    """One rubric dimension: its name (the answer-block key), what it asks, its weight."""

    name: str = ""
    description: str = ""
    weight: float = 1.0


def paper_dimensions() -> list[Dimension]:
    """The five dimensions of ProofJudge section 2.1, equally weighted."""
    return [
        Dimension("library_leverage", "reuses existing library results instead of re-proving them"),
        Dimension("automation_fit", "uses automation (simp, ring, linarith, ...) where it fits, not where it obscures"),
        Dimension("structural_clarity", "clear structure; decomposes into reusable, independently useful lemmas"),
        Dimension("statement_quality", "the statement is general, minimal in hypotheses and well named"),
        Dimension("mathlib_conventions", "follows the library's naming, style and tactic conventions"),
    ]


@dataclass
class ProofJudgeConfig:
    """Hydra schema of ``configs/proofjudge.yaml``."""

    input: str = "tests/data/proofjudge_illustrative.jsonl"
    out: str = "runs/proofjudge"
    on_error: str = "raise"
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    judge: JudgeConfig = field(default_factory=lambda: JudgeConfig(template="proofjudge_rubric", parser="rubric_scores",
                                                                   n=3, temperature=1.0, max_tokens=4096))
    judge_name: str = "judge"
    dimensions: list[Dimension] = field(default_factory=paper_dimensions)
    low: int = 1
    high: int = 10
    ties: str = "loss"  # loss | half
    bootstrap: BootstrapSpec = field(default_factory=lambda: BootstrapSpec(n=2000, cluster="item"))
    verifier_rows: str | None = None  # eval.judge output: add our verifier's pass noise to the report
    progress: bool = True


def weighted_score(scores: dict[str, float], dimensions: Sequence[Dimension]) -> float:
    """Final score: the weight-normalised mean of the dimension scores.

    >>> weighted_score({"a": 8, "b": 4}, [Dimension("a", weight=3), Dimension("b", weight=1)])
    7.0
    """
    total = sum(d.weight for d in dimensions)
    if total <= 0:
        raise InputError("rubric weights must sum to a positive number")
    return sum(scores[_clean_key(d.name)] * d.weight for d in dimensions) / total


def alignment_stats(accepted: Sequence[Sequence[float | None]], rejected: Sequence[Sequence[float | None]],
                    ties: str = "loss", spec: BootstrapSpec = BootstrapSpec(n=2000)) -> dict[str, Any]:
    """Alignment of judge scores with reviewers over items x replicates.

    ``accepted[i][r]`` / ``rejected[i][r]`` are the final scores of item i's two revisions in
    replicate r (None = unparseable: that cell is left out and counted).

    >>> s = alignment_stats([[8, 7], [5, 6], [9, 9]], [[6, 7], [4, 3], [2, 1]], spec=BootstrapSpec(n=200))
    >>> s["alignment"], s["n_cells"], s["sign_test"]["wins"], s["flip"]["unstable"]
    (0.833333333333, 6, 2, 0.333333333333)
    """
    if ties not in ("loss", "half"):
        raise InputError(f"ties must be loss or half, got {ties!r}")
    if len(accepted) != len(rejected):
        raise ValueError("accepted and rejected need the same items")
    cells: list[list[float | None]] = []
    missing = 0
    for acc, rej in zip(accepted, rejected):
        row = []
        for a, b in zip(acc, rej, strict=True):
            if a is None or b is None:
                row.append(None)
                missing += 1
            else:
                row.append(1.0 if a > b else (0.5 if ties == "half" else 0.0) if a == b else 0.0)
        cells.append(row)
    present = [v for row in cells for v in row if v is not None]
    wins = losses = 0
    for row in cells:  # item-level sign test: majority of replicates
        vs = [v for v in row if v is not None]
        if vs:
            m = sum(vs) / len(vs)
            wins += m > 0.5
            losses += m < 0.5
    n_rep = max((len(r) for r in cells), default=0)
    per_rep = []
    for k in range(n_rep):
        vs = [row[k] for row in cells if k < len(row) and row[k] is not None]
        w, lo = sum(v == 1.0 for v in vs), sum(v == 0.0 for v in vs)
        per_rep.append({"replicate": k, "alignment": round(sum(vs) / len(vs), 12) if vs else None, "n": len(vs),
                        "sign_test_p": sign_test(w, lo)})
    lo_ci, hi_ci = two_level_bootstrap_ci(cells, spec)
    verdicts = [[None if v is None else ("aligned" if v == 1.0 else "not") for v in row] for row in cells]
    return {
        "alignment": round(sum(present) / len(present), 12) if present else None,
        "ci": [lo_ci, hi_ci],
        "n_items": len(cells), "n_cells": len(present), "n_unparseable_cells": missing,
        "sign_test": {"wins": wins, "losses": losses, "ties": len(cells) - wins - losses, "p": sign_test(wins, losses)},
        "per_replicate": per_rep,
        "flip": flip_rate(verdicts),
        "ties": ties,
        "bootstrap": spec.to_dict() | {"method": "percentile, two-level (items, replicates)"},
    }


def load_records(path: str | Path, on_error: str = "raise") -> tuple[list[dict[str, Any]], list[RecordError]]:
    """ProofJudge pairs (``verifier.io.load_rows``): ``id``, ``statement``, ``accepted``, ``rejected``."""
    return load_rows(path, ("statement", "accepted", "rejected"), on_error)


def run(cfg: ProofJudgeConfig) -> dict[str, Any]:
    """Score both revisions of every pair ``judge.n`` times, then alignment statistics and report."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    recs, errors = load_records(cfg.input, cfg.on_error)
    dims = cfg.dimensions
    keys = [_clean_key(d.name) for d in dims]
    judge = Judge(cfg.endpoint, cfg.judge, parse_kwargs={"dimensions": keys, "low": cfg.low, "high": cfg.high},
                  dimensions=keys)
    tmpl = {"dimensions": [{"key": k, "description": d.description} for k, d in zip(keys, dims)],
            "low": cfg.low, "high": cfg.high}
    scores: dict[str, list[list[float | None]]] = {}
    rows = [{"id": r["id"]} for r in recs]
    statuses: Counter = Counter()
    for side in ("accepted", "rejected"):
        items = [(f"{r['id']}:{side}", tmpl | {"statement": r["statement"], "context": r.get("context", ""),
                                             "proof": r[side]}) for r in recs]
        calls = judge.run(items, progress=cfg.progress)
        scores[side] = [[weighted_score(c.parsed.value, dims) if c.parsed.ok else None for c in cs] for cs in calls]
        for row, cs, sc in zip(rows, calls, scores[side], strict=True):
            row[side] = {"scores": sc, "calls": [c.to_dict() for c in cs]}
            statuses.update(c.parsed.status.value for c in cs)
    stats = alignment_stats(scores["accepted"], scores["rejected"], cfg.ties, cfg.bootstrap)
    dim_means = {}
    for side in ("accepted", "rejected"):
        for k in keys:
            vals = [c["value"][k] for row in rows for c in row[side]["calls"] if c["parse_status"] == "ok"]
            dim_means.setdefault(k, {})[side] = sum(vals) / len(vals) if vals else None
    result = {"judge": cfg.judge_name, "n_records": len(recs), "n_skipped": len(errors), "replicates": cfg.judge.n,
              "dimensions": [vars(d) for d in dims], "alignment": stats, "dimension_means": dim_means,
              "parse_counts": dict(sorted(statuses.items())), "errors": [str(e) for e in errors]}
    if cfg.verifier_rows:
        result["verifier_pass_noise"] = pass_noise(read_jsonl(cfg.verifier_rows), cfg.bootstrap)
    write_jsonl(out / JUDGMENTS, rows)
    write_metrics(out, result)
    write_report(out, result, cfg)
    a = stats["alignment"]
    print(f"proofjudge n={len(recs)} replicates={cfg.judge.n} alignment={'nan' if a is None else f'{a:.3f}'} "
          f"ci={stats['ci']} sign_p={stats['sign_test']['p']:.3g} flip={stats['flip']['pairwise']}")
    print(f"wrote {out / 'report.md'}")
    return result


def write_report(out: Path, res: dict[str, Any], cfg: ProofJudgeConfig) -> None:
    """Markdown shaped like ProofJudge Table 1 plus per-replicate alignment, and a PNG (``verifier.results``)."""
    s = res["alignment"]
    lo, hi = s["ci"]
    ci = "—" if lo is None else f"{pct(lo)}–{pct(hi)}"
    lines = ["# ProofJudge alignment report", "",
             f"input: `{cfg.input}` ({res['n_records']} pairs, {res['n_skipped']} skipped), "
             f"{res['replicates']} replicates, ties count as {s['ties']}.", "",
             *md_table(["Judge", "Alignment % (95% CI)", "sign-test p", "flip rate % (pairwise)", "unstable items %",
                        "unparseable cells"],
                       [[res["judge"], f"{pct(s['alignment'])} ({ci})", f"{s['sign_test']['p']:.3g}",
                         pct(s["flip"]["pairwise"]), pct(s["flip"]["unstable"]), s["n_unparseable_cells"]]]),
             "", "Interval: clustered bootstrap over items and replicates "
             f"(n={s['bootstrap']['n']}, seed={s['bootstrap']['seed']}). Sign test over items (majority of "
             f"replicates): {s['sign_test']['wins']} aligned, {s['sign_test']['losses']} not, "
             f"{s['sign_test']['ties']} tied or unparseable.", "",
             *md_table(["replicate", "alignment %", "n", "sign-test p"],
                       ([r["replicate"], pct(r["alignment"]), r["n"], f"{r['sign_test_p']:.3g}"]
                        for r in s["per_replicate"])), ""]

    def f(x: float | None) -> str:
        return "—" if x is None else f"{x:.2f}"

    lines += md_table(["dimension", "weight", "mean accepted", "mean rejected"],
                      ([d["name"], f"{d['weight']:g}", f(res["dimension_means"][_clean_key(d["name"])]["accepted"]),
                        f(res["dimension_means"][_clean_key(d["name"])]["rejected"])] for d in res["dimensions"]))
    lines += ["", f"Judge calls by parse status: {res['parse_counts']}", ""]
    if "verifier_pass_noise" in res:
        v = res["verifier_pass_noise"]
        vlo, vhi = v["ci"]
        lines += ["## Our verifier's passes", "",
                  f"{v['n_trajectories']} trajectories, {v['n_passes']} passes ({v['n_unparseable']} unparseable): "
                  f"accept rate {pct(v['accept_rate'])}% (95% CI {pct(vlo)}–{pct(vhi)}, clustered over trajectories "
                  f"and passes), pairwise flip rate {pct(v['flip']['pairwise'])}%, non-unanimous trajectories "
                  f"{pct(v['flip']['unstable'])}%.", ""]
    lines += ["![alignment](proofjudge.png)", ""] + [f"- skipped: {e}" for e in res["errors"]]
    write_markdown(out, lines)
    reps = [r for r in s["per_replicate"] if r["alignment"] is not None]
    if s["alignment"] is not None:
        plot_bars([f"rep {r['replicate']}" for r in reps], [r["alignment"] for r in reps], out / "proofjudge.png",
                  ylabel="judge-reviewer alignment (%)", colors=["C0"] * len(reps),
                  hlines=[(s["alignment"], "-", "all replicates"), (0.5, ":", "chance")],
                  band=None if lo is None else (lo, hi))


@hydra_main("proofjudge", ProofJudgeConfig)
def main(cfg: ProofJudgeConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
