"""Verifier-uncertainty selection of trajectories for expert annotation (sections 3.1, 4.1).

``python -m data_pipeline.selection trajectories=PATH (judgments=JUDGE.jsonl | endpoint.base_url=URL ...) out=DIR
budget=K per_problem_cap=C``

Each trajectory is verified n times (an existing judgments JSONL written by ``eval.judge``,
or n passes on an engine via the one runner ``verifier.runner.judge`` with the one judge config
``judge``: its template and ``with_reference`` make the prompt, recorded per row and in
``selection_summary.json`` under ``judge``). All n passes are needed: ``judge.early_stop=true``
and early-stopped rows in a judgments file are refused with an error (an early-stopped
judgment would look certain after one pass). Verifier uncertainty is the entropy
(bits) of the repeated outcomes — the verdict (``valid``/``invalid``/``unparseable``), or with
``outcome=verdict_step`` the verdict together with the first error step. Then:

1. problem level: problems whose trajectories are all consistently judged correct (every
   trajectory's accept fraction >= ``easy_accept_fraction``) are dropped as likely easy;
2. proof level: trivially judged trajectories (entropy <= ``min_entropy``) are dropped;
3. budget: the rest are ranked by entropy (ties by a seeded hash) and the top ``budget`` are
   taken with at most ``per_problem_cap`` per problem; they form the annotation queue.

Every trajectory gets a status (``selected``, ``dropped_easy_problem``, ``dropped_trivial``,
``over_problem_cap``, ``over_budget``, ``no_judgment``) in ``scores.parquet``; nothing is dropped
silently. Scoring and selection are vectorised (numpy/pandas) over one row per verdict
(``make bench-select``: 1,000,000 verdict rows).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd
from scipy.stats import entropy

from verifier.config import EndpointConfig, hydra_main
from verifier.engine import OpenAIEngine
from verifier.errors import InputError
from verifier.formats import load_any
from verifier.io import write_jsonl
from verifier.judging import JudgeConfig, PassCache
from verifier.judgment import Judgment, load_judgments
from verifier.outputs import holds_output
from verifier.records import NO_STEP, ProofTrajectory, Verdict
from verifier.runner import judge

VALID, UNPARSEABLE, INVALID = 0, 1, 2  # outcome codes; invalid with step s -> INVALID + 1 + s (verdict_step)
MAX_STEP_CODE = 61  # steps >= this share one outcome code
N_OUTCOMES = INVALID + 2 + MAX_STEP_CODE
STATUSES = ("selected", "over_budget", "over_problem_cap", "dropped_trivial", "dropped_easy_problem", "no_judgment")


@dataclass
class SelectConfig:
    """Options of ``python -m data_pipeline.selection`` (mirrored by ``configs/select.yaml``)."""

    trajectories: str | None = None  # candidate trajectories (JSONL, ingested folder or parquet); annotation optional
    judgments: str | None = None  # eval.judge JSONL; when null, judge with ``endpoint``
    out: str | None = None
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)  # the one judge config; early_stop must be false
    cache: str | None = None  # SQLite pass cache of the engine path (verifier.judging.PassCache)
    outcome: str = "verdict"  # verdict | verdict_step
    unparseable: str = "category"  # category (its own outcome) | reject (counts as invalid) | ignore (left out)
    easy_accept_fraction: float = 1.0  # problem dropped if every trajectory accepts at least this often
    min_entropy: float = 0.0  # keep trajectories with entropy strictly above this
    budget: int | None = None  # annotation budget (top-K); null = all that pass the filters
    per_problem_cap: int | None = None  # at most this many selected trajectories per problem
    seed: int = 0  # tie-breaking among equal entropies
    plot: bool = True
    progress: bool = True


def entropy_bits(counts: np.ndarray) -> np.ndarray:
    """Row-wise Shannon entropy (bits) of outcome counts (``scipy.stats.entropy``); 0 for an empty row.

    >>> entropy_bits(np.array([[4, 4], [8, 0], [0, 0], [2, 2]])).round(3).tolist()
    [1.0, 0.0, 0.0, 1.0]
    """

    counts = np.asarray(counts, dtype=np.float64).reshape(len(counts), -1)
    if (counts < 0).any():
        raise ValueError(f"entropy: negative outcome count in row {int(np.flatnonzero((counts < 0).any(1))[0])}")
    tot = counts.sum(1)
    out = np.zeros(len(counts))
    if (tot > 0).any():
        out[tot > 0] = entropy(counts[tot > 0], base=2, axis=1)
    return out


def outcome_codes(verdict: np.ndarray, step: np.ndarray, outcome: str = "verdict") -> np.ndarray:
    """Outcome code per verdict row. ``verdict``: 1 valid, 0 invalid, -1 unparseable (int8)."""
    verdict = np.asarray(verdict)
    code = np.where(verdict == 1, VALID, np.where(verdict < 0, UNPARSEABLE, INVALID)).astype(np.int64)
    if outcome == "verdict_step":
        s = np.clip(np.asarray(step, dtype=np.int64), NO_STEP, MAX_STEP_CODE)
        code = np.where(code == INVALID, INVALID + 1 + s, code)
    elif outcome != "verdict":
        raise InputError(f"select config, field 'outcome': use verdict or verdict_step, got {outcome!r}")
    return code


def score(verdicts: pd.DataFrame, trajectories: pd.DataFrame, cfg: SelectConfig) -> pd.DataFrame:
    """Score and select, vectorised.

    ``verdicts``: one row per pass with columns ``traj`` (row index into ``trajectories``),
    ``verdict`` (1 valid, 0 invalid, -1 unparseable) and ``step`` (first error step).
    ``trajectories``: columns ``id`` and ``problem_id``. Returns one row per trajectory with
    counts, accept fraction, entropy, problem flags, rank and status.
    """
    if cfg.unparseable not in ("category", "reject", "ignore"):
        raise InputError(f"select config, field 'unparseable': use category, reject or ignore, got {cfg.unparseable!r}")
    n_traj = len(trajectories)
    t = verdicts["traj"].to_numpy(np.int64)
    v = verdicts["verdict"].to_numpy(np.int64)
    step = verdicts["step"].to_numpy(np.int64) if "step" in verdicts else np.full(len(v), NO_STEP)
    if len(t) and (t.min() < 0 or t.max() >= n_traj):
        raise ValueError("verdict rows refer to trajectories outside the table")
    unp = v < 0
    n_passes = np.bincount(t, minlength=n_traj)
    n_unp = np.bincount(t, weights=unp, minlength=n_traj).astype(np.int64)
    n_acc = np.bincount(t, weights=v == 1, minlength=n_traj).astype(np.int64)
    if cfg.unparseable == "ignore":
        keep = ~unp
        t_e, v_e, s_e = t[keep], v[keep], step[keep]
        counted = n_passes - n_unp
    else:
        t_e, v_e, s_e = t, (np.where(unp, 0, v) if cfg.unparseable == "reject" else v), step
        counted = n_passes
    codes = outcome_codes(v_e, s_e, cfg.outcome)
    k = int(codes.max()) + 1 if len(codes) else 1
    counts = np.bincount(t_e * k + codes, minlength=n_traj * k).reshape(n_traj, k)
    ent = entropy_bits(counts)
    acc_frac = np.divide(n_acc, counted, out=np.zeros(n_traj), where=counted > 0)

    df = pd.DataFrame({
        "id": trajectories["id"].to_numpy(), "problem_id": trajectories["problem_id"].to_numpy(),
        "n_passes": n_passes, "n_accept": n_acc, "n_unparseable": n_unp,
        "n_reject": n_passes - n_acc - n_unp, "accept_fraction": acc_frac, "entropy": ent,
    })
    judged = n_passes > 0
    pid_codes, _ = pd.factorize(df["problem_id"], sort=False)
    n_prob = int(pid_codes.max()) + 1 if n_traj else 0
    # problem level: every judged trajectory of the problem is consistently judged correct
    not_easy = judged & (acc_frac < cfg.easy_accept_fraction)
    has_judged = np.bincount(pid_codes, weights=judged, minlength=n_prob) > 0
    easy_prob = has_judged & (np.bincount(pid_codes, weights=not_easy, minlength=n_prob) == 0)
    df["problem_easy"] = easy_prob[pid_codes]
    trivial = ent <= cfg.min_entropy
    eligible = judged & ~df["problem_easy"].to_numpy() & ~trivial
    # rank eligible by entropy desc, ties by a seeded hash of the id (stable across runs)
    tie = pd.util.hash_array(df["id"].to_numpy().astype(str), hash_key=f"{cfg.seed:016d}"[:16])
    order = np.lexsort((tie, -ent, ~eligible))
    rank = np.empty(n_traj, dtype=np.int64)
    rank[order] = np.arange(n_traj)
    # per-problem rank among eligible, in global rank order
    sorted_pid = pid_codes[order]
    sorted_elig = eligible[order]
    within = pd.Series(sorted_elig.astype(np.int64)).groupby(sorted_pid).cumsum().to_numpy() - 1
    within_problem = np.empty(n_traj, dtype=np.int64)
    within_problem[order] = within
    capped = eligible & (within_problem >= cfg.per_problem_cap if cfg.per_problem_cap is not None else False)
    cand = eligible & ~capped
    cand_rank = np.cumsum(cand[order]) - 1
    cand_pos = np.empty(n_traj, dtype=np.int64)
    cand_pos[order] = cand_rank
    selected = cand & (cand_pos < cfg.budget if cfg.budget is not None else True)

    status = np.full(n_traj, "over_budget", dtype=object)
    status[selected] = "selected"
    status[capped] = "over_problem_cap"
    status[judged & trivial & ~df["problem_easy"].to_numpy()] = "dropped_trivial"
    status[judged & df["problem_easy"].to_numpy()] = "dropped_easy_problem"
    status[~judged] = "no_judgment"
    df["rank"] = np.where(eligible, rank, -1)
    df["status"] = pd.Categorical(status, categories=list(STATUSES))
    return df


# ----------------------------------------------------------------------------------- inputs


def verdict_rows(judgments: Iterable[Judgment], index: dict[str, int]) -> pd.DataFrame:
    """Flatten judgment records into one row per pass: trajectory index, verdict code (1 valid, 0 invalid,
    -1 unparseable) and flagged step."""
    t, v, s = [], [], []
    for j in judgments:
        if j.id not in index:
            raise InputError(f"record {j.id!r}, field 'id': a judgment for a trajectory that is not in the input")
        i = index[j.id]
        for p in j.passes:
            t.append(i)
            v.append(-1 if not p.ok or p.verdict is None else int(p.verdict is Verdict.VALID))
            s.append(p.first_error_step)
    return pd.DataFrame({"traj": np.asarray(t, np.int64), "verdict": np.asarray(v, np.int8),
                         "step": np.asarray(s, np.int64)})


def as_judgments(rows: Iterable[Judgment | dict[str, Any]]) -> list[Judgment]:
    """Judgment records of rows (selection reads the passes only: a row may lack the aggregate)."""
    return [r if isinstance(r, Judgment) else Judgment.from_row(r, passes_only=True) for r in rows]


def check_judge(cfg: SelectConfig) -> None:
    """Selection needs all n passes: an early-stopped judgment is no 1-pass certainty (refused, not scored)."""
    if cfg.judge.early_stop:
        raise InputError("select config, field 'judge.early_stop': selection scores the entropy of all judge.n "
                         "passes; an early-stopped judgment would look certain after one pass. "
                         "Set judge.early_stop=false")


def check_rows(judgments: Sequence[Judgment], trajs: Sequence[ProofTrajectory], cfg: SelectConfig) -> dict[str, Any]:
    """Refuse judgments selection cannot score honestly; returns the prompt they were judged with.

    * ``early_stopped`` rows (fewer than n passes because the decision was fixed) are an error;
    * a row's recorded prompt (``template``, ``with_reference``) must be the configured verifier's
      (``judge.template``; the reference solution in the prompt iff ``judge.with_reference`` and the
      trajectory has one). Rows written before the prompt was recorded are counted as ``unrecorded``.
    """
    by_id = {t.id: t for t in trajs}
    unrecorded = 0
    for j in judgments:
        rid = j.id
        if j.early_stopped:
            raise InputError(f"record {rid!r}, field 'early_stopped': an early-stopped judgment has fewer than n "
                             "passes and cannot be scored as uncertainty; re-judge with judge.early_stop=false")
        if "template" not in j.columns:
            unrecorded += 1
            continue
        if j.columns["template"] != cfg.judge.template:
            raise InputError(f"record {rid!r}, field 'template': judged with {j.columns['template']!r}, but the "
                             f"verifier is configured with judge.template={cfg.judge.template!r}")
        t = by_id.get(rid)
        want = bool(cfg.judge.with_reference and t is not None and t.reference_solution)
        used = bool(j.columns.get("with_reference"))
        if used != want:
            raise InputError(f"record {rid!r}, field 'with_reference': judged {'with' if used else 'without'}"
                             f" the reference solution, but judge.with_reference={cfg.judge.with_reference}")
    return {"template": cfg.judge.template, "with_reference": cfg.judge.with_reference,
            "prompts_with_reference": sum(bool(j.columns.get("with_reference")) for j in judgments),
            "prompt_unrecorded": unrecorded, "n": cfg.judge.n, "early_stop": False}


def judge_rows(trajs: Sequence[ProofTrajectory], cfg: SelectConfig, out: Path) -> list[Judgment]:
    """n passes per trajectory on the engine with the one runner: ``out/judgments.jsonl`` (resumable);
    the judgment records in memory, in input order."""
    check_judge(cfg)
    path = out / "judgments.jsonl"
    cache = PassCache(cfg.cache) if cfg.cache else None
    try:
        res = judge(trajs, OpenAIEngine(cfg.endpoint), cfg.judge, path, cache=cache, progress=cfg.progress,
                    desc=f"select: judge n={cfg.judge.n}")
    finally:
        if cache is not None:
            cache.close()
    missing = [t.id for t in trajs if t.id not in res.rows]
    if missing:
        raise RuntimeError(f"{len(missing)} trajectories have no complete judgment (requests failed), e.g. "
                           f"{missing[0]!r}; re-run to finish (done ones are kept in {path})")
    judged = res.judged()
    return [judged[t.id] for t in trajs]


def load_candidates(path: str | os.PathLike) -> list[ProofTrajectory]:
    return load_any(path).records


def select(trajs: Sequence[ProofTrajectory], judgments: Iterable[Judgment | dict[str, Any]],
           cfg: SelectConfig) -> pd.DataFrame:
    """Score and select ``trajs`` from their judgment records (or rows: ``as_judgments``)."""
    index = {t.id: i for i, t in enumerate(trajs)}
    if len(index) != len(trajs):
        raise InputError("duplicate trajectory ids in the input")
    table = pd.DataFrame({"id": [t.id for t in trajs], "problem_id": [t.problem_id for t in trajs]})
    return score(verdict_rows(as_judgments(judgments), index), table, cfg)


def summary(df: pd.DataFrame, cfg: SelectConfig, judge_info: dict[str, Any] | None = None) -> dict[str, Any]:
    st = df["status"].value_counts()
    prob = df.groupby("problem_id", sort=False)["problem_easy"].first()
    sel = df[df["status"] == "selected"]
    return {
        "trajectories": int(len(df)), "problems": int(prob.size), "easy_problems_dropped": int(prob.sum()),
        "status": {s: int(st.get(s, 0)) for s in STATUSES},
        "selected": int(len(sel)), "selected_problems": int(sel["problem_id"].nunique()),
        "budget": cfg.budget, "per_problem_cap": cfg.per_problem_cap,
        "mean_entropy_all": float(df["entropy"].mean()) if len(df) else 0.0,
        "mean_entropy_selected": float(sel["entropy"].mean()) if len(sel) else 0.0,
        "outcome": cfg.outcome, "unparseable": cfg.unparseable,
        "judge": judge_info or {},  # the verifier prompt the passes came from (template, reference solution)
    }


def plot_entropy(df: pd.DataFrame, path: Path) -> None:
    # lazy: matplotlib is slow to import and needs its backend set first; only the plot uses it
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    bins = np.linspace(0, max(1.0, float(df["entropy"].max()) if len(df) else 1.0), 21)
    ax.hist(df["entropy"], bins=bins, alpha=0.6, label="all")
    ax.hist(df.loc[df["status"] == "selected", "entropy"], bins=bins, alpha=0.8, label="selected")
    ax.set_xlabel("verifier uncertainty (entropy, bits)")
    ax.set_ylabel("trajectories")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@holds_output()
def run(cfg: SelectConfig) -> pd.DataFrame:
    """Load, judge or read judgments, score, select; write queue, scores, summary (and a plot)."""
    if not cfg.trajectories or not cfg.out:
        raise InputError("select config: trajectories=PATH and out=DIR are required")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    check_judge(cfg)
    trajs = load_candidates(cfg.trajectories)
    judgments = load_judgments(cfg.judgments, passes_only=True) if cfg.judgments else judge_rows(trajs, cfg, out)
    judge_info = {"source": cfg.judgments or str(out / "judgments.jsonl"), **check_rows(judgments, trajs, cfg)}
    df = select(trajs, judgments, cfg)
    df.to_parquet(out / "scores.parquet", index=False)
    by_id = {t.id: t for t in trajs}
    sel = df[df["status"] == "selected"].sort_values("rank")
    queue = []
    for r in sel.itertuples(index=False):
        t = by_id[r.id]
        meta = {**t.meta, "selection": {"entropy": float(r.entropy), "accept_fraction": float(r.accept_fraction),
                                        "n_passes": int(r.n_passes), "rank": int(r.rank)}}
        queue.append({**t.to_dict(), "meta": meta})
    write_jsonl(out / "annotation_queue.jsonl", queue)
    s = summary(df, cfg, judge_info)
    (out / "selection_summary.json").write_text(json.dumps(s, indent=1) + "\n", encoding="utf-8")
    if cfg.plot:
        plot_entropy(df, out / "entropy.png")
    return df


def main() -> None:
    """Hydra app: ``python -m data_pipeline.selection trajectories=... judgments=... out=DIR budget=K``."""
    @hydra_main("select", SelectConfig)
    def _run(cfg: SelectConfig) -> None:
        df = run(cfg)
        s = summary(df, cfg)
        print(f"selected {s['selected']} of {s['trajectories']} trajectories for annotation "
              f"(easy problems dropped={s['easy_problems_dropped']}, status {s['status']}); "
              f"queue: {Path(cfg.out) / 'annotation_queue.jsonl'}")

    _run()


if __name__ == "__main__":
    main()
