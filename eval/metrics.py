"""VerifierBench / ProverBench metrics (AdvancedMathBench sections 5.2-5.4, appendix C.5).

Pure functions over gold trajectories and predictions; no I/O.

* **Rough** (Table 2, 3): TPR = valid proofs judged valid / valid proofs, TNR = invalid
  proofs judged invalid / invalid proofs, Balanced F1 = 2·TPR·TNR / (TPR + TNR).
  Gold polarity per C.5: valid iff there is no fatal error (``Annotation.is_valid``).
* **Meta-Verification**: a sample is correct only if its polarity is right AND its
  meta-verifier grade is at least ``meta_threshold`` (default BASIC_MATCH); TPR, TNR and
  Balanced F1 on that. A missing (failed) grade counts as not correct and is counted.
* **ProcessBench** (Zheng et al., 2024, ``code/run_eval.py``): ``error_acc`` = rejected at
  exactly the gold first error step on erroneous samples, ``correct_acc`` = accepted on
  correct samples (a rejection, with or without a step, and an unparseable output are
  misses: ``Prediction.pb_step``), ``f1`` their harmonic mean. Invalid samples whose fatal step is unknown (OPC) are
  skipped and counted.
* **k-curve**: pessimistic acceptance over the first k passes, k = 1..n, and majority.
* **Flip rate** (ProofJudge-style judge noise): mean pairwise disagreement between passes.
* 95% CIs by a bootstrap over problems (clustered by ``problem_id``; ``eval.stats``).

Every metric is reported as ``{"value", "counts", "ci"}``; ``value`` is a fraction in
[0, 1], or None when its denominator is empty (e.g. no valid proofs in a split).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from eval.stats import (
    DEFAULT_BOOTSTRAP,
    BootstrapSpec,
    bootstrap_sums,
    cluster_bootstrap,
    harmonic,
    paired_bootstrap,
    percentile_ci,
    safe_ratio,
)
from eval.stats import flip_rate as _stats_flip_rate
from verifier.aggregate import AggregationPolicy, aggregate
from verifier.judgment import Judgment
from verifier.records import (
    NO_STEP,
    MetaGrade,
    ParseStatus,
    ProofTrajectory,
    RecordError,
    Verdict,
    VerificationOutput,
)

# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class PassResult:
    """One verification pass as written by ``eval.judge`` (``passes`` list of a prediction)."""

    index: int
    verdict: Verdict | None
    first_error_step: int = NO_STEP
    parse_status: ParseStatus = ParseStatus.OK

    def as_output(self) -> VerificationOutput:
        return VerificationOutput(self.parse_status, self.verdict, self.first_error_step)

    @property
    def accepts(self) -> bool:
        return self.parse_status.ok and self.verdict is Verdict.VALID


@dataclass(frozen=True)
class Prediction:
    """One line of a predictions JSONL: id, verdict, first_error_step, [meta_grade], [passes].

    ``verdict`` None means the verifier produced no parseable verdict (counted; treated
    as a rejection, like ``AggregationPolicy(unparseable="reject")``).
    """

    id: str
    verdict: Verdict | None
    first_error_step: int = NO_STEP
    meta_grade: MetaGrade | None = None
    passes: tuple[PassResult, ...] = ()
    has_meta: bool = False  # the line carried a meta_grade key (possibly null = failed)

    @property
    def pb_step(self) -> int | None:
        """The ProcessBench-style prediction: -1 when accepted, the step when rejected at a step.

        None (matches no gold label) for a rejection without a step (``invalid`` with
        ``first_error_step: -1``) and for an unparseable output: neither may be credited as
        "no error" on a correct sample.

        >>> [Prediction("a", v, s).pb_step for v, s in ((Verdict.VALID, 2), (Verdict.INVALID, 2),
        ...                                              (Verdict.INVALID, -1), (None, -1), (None, 2))]
        [-1, 2, None, None, None]
        """
        if self.verdict is Verdict.VALID:
            return NO_STEP
        if self.verdict is Verdict.INVALID and self.first_error_step != NO_STEP:
            return self.first_error_step
        return None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], line: int | None = None) -> "Prediction":
        """Validate one prediction row (the judgment record's row, ``verifier.judgment``); errors name the
        record id and the field.

        >>> Prediction.from_dict({"id": "a", "verdict": "invalid", "first_error_step": 2, "meta_grade": "basic_match"})
        Prediction(id='a', verdict=<Verdict.INVALID: 'invalid'>, first_error_step=2, meta_grade=<MetaGrade.BASIC_MATCH: 'BASIC_MATCH'>, passes=(), has_meta=True)
        >>> Prediction.from_dict({"id": "a", "verdict": "yes"})
        Traceback (most recent call last):
        ...
        verifier.records.RecordError: record 'a', field 'verdict': unknown verdict 'yes' (expected valid or invalid)
        """
        return cls.from_judgment(Judgment.from_row(d, line))

    @classmethod
    def from_judgment(cls, j: Judgment) -> "Prediction":
        """What scoring reads of a judgment record (in memory: the runner's results)."""
        passes = tuple(PassResult(i, p.verdict, p.first_error_step, p.status) for i, p in enumerate(j.passes))
        return cls(j.id, j.verdict, j.first_error_step, j.meta_grade, passes, has_meta=j.has_meta)


# --------------------------------------------------------------------------- core counts

COLUMNS = ("pos", "neg", "tp", "tn", "meta_tp", "meta_tn", "pb_err", "pb_err_hit", "pb_cor", "pb_cor_hit",
           "accept")


@dataclass(frozen=True)
class _Ratio:
    num: str
    den: str


@dataclass(frozen=True)
class _HMean:
    a: str
    b: str


METRICS: dict[str, _Ratio | _HMean] = {
    "rough.tpr": _Ratio("tp", "pos"),
    "rough.tnr": _Ratio("tn", "neg"),
    "rough.balanced_f1": _HMean("rough.tpr", "rough.tnr"),
    "meta.tpr": _Ratio("meta_tp", "pos"),
    "meta.tnr": _Ratio("meta_tn", "neg"),
    "meta.balanced_f1": _HMean("meta.tpr", "meta.tnr"),
    "processbench.error_acc": _Ratio("pb_err_hit", "pb_err"),
    "processbench.correct_acc": _Ratio("pb_cor_hit", "pb_cor"),
    "processbench.f1": _HMean("processbench.error_acc", "processbench.correct_acc"),
}
_ROUGH_PB = [k for k in METRICS if not k.startswith("meta.")]


def record_row(gold: ProofTrajectory, pred: Prediction,
               meta_threshold: MetaGrade = MetaGrade.BASIC_MATCH) -> list[int]:
    """Indicator counts of one (gold, prediction) pair, in ``COLUMNS`` order.

    >>> from verifier.records import Annotation
    >>> g = ProofTrajectory("a", "p", "P", ("s0", "s1"), annotation=Annotation(first_fatal_error_step=1))
    >>> dict(zip(COLUMNS, record_row(g, Prediction("a", Verdict.INVALID, 1, MetaGrade.POOR_MATCH))))
    {'pos': 0, 'neg': 1, 'tp': 0, 'tn': 1, 'meta_tp': 0, 'meta_tn': 0, 'pb_err': 1, 'pb_err_hit': 1, 'pb_cor': 0, 'pb_cor_hit': 0, 'accept': 0}
    """
    ann = gold.annotation
    if ann is None:
        raise RecordError(gold.id, "annotation", "gold record has no expert annotation")
    valid = ann.is_valid
    accept = pred.verdict is Verdict.VALID
    right = accept == valid
    meta_ok = right and pred.meta_grade is not None and pred.meta_grade >= meta_threshold
    known = valid or not ann.fatal_step_unknown
    return [
        int(valid), int(not valid),
        int(valid and right), int(not valid and right),
        int(valid and meta_ok), int(not valid and meta_ok),
        int(not valid and known), int(not valid and known and pred.pb_step == ann.first_fatal_error_step),
        int(valid), int(valid and pred.pb_step == NO_STEP),
        int(accept),
    ]


def _values(sums: np.ndarray, names: Iterable[str]) -> dict[str, np.ndarray]:
    """Vectorised metric values for sums [B, K]."""
    col = {c: sums[:, i] for i, c in enumerate(COLUMNS)}
    out: dict[str, np.ndarray] = {}
    for name in METRICS:
        m = METRICS[name]
        if isinstance(m, _Ratio):
            out[name] = safe_ratio(col[m.num], col[m.den])
    for name in METRICS:
        m = METRICS[name]
        if isinstance(m, _HMean):
            out[name] = harmonic(out[m.a], out[m.b])
    return {n: out[n] for n in names}


DELTA_METRICS = ("rough.tpr", "rough.tnr", "rough.balanced_f1", "meta.tpr", "meta.tnr", "meta.balanced_f1")


def metric_statistic(names: Sequence[str] = DELTA_METRICS):
    """``paired_bootstrap``'s statistic for metrics of ``COLUMNS`` sums [..., len(COLUMNS)] -> {name: [...]}."""

    def stat(sums: np.ndarray) -> dict[str, np.ndarray]:
        flat = np.asarray(sums, dtype=float).reshape(-1, len(COLUMNS))
        return {k: v.reshape(np.shape(sums)[:-1]) for k, v in _values(flat, names).items()}

    return stat


def metric_deltas(a_seeds: Sequence[np.ndarray], b_seeds: Sequence[np.ndarray], clusters: Sequence[str],
                  spec: BootstrapSpec = DEFAULT_BOOTSTRAP, paired_seeds: bool = False,
                  names: Sequence[str] = DELTA_METRICS) -> dict[str, tuple]:
    """Arm A minus arm B in each metric of ``names`` (Rough / Meta TPR, TNR, Balanced F1) over per-record rows
    [N, len(COLUMNS)] of each training seed (the same N held-out records, ``clusters`` their problems), with the
    clustered CI of ``eval.stats.paired_bootstrap`` (problems; seeds per arm, or seed pairs with ``paired_seeds``).
    Returns ``{metric: (point, lo, hi)}``."""
    return paired_bootstrap([np.stack(a_seeds), np.stack(b_seeds)], clusters, metric_statistic(names), spec,
                            paired_seeds)


def ratio_delta(a_seeds: Sequence[np.ndarray], b_seeds: Sequence[np.ndarray], clusters: Sequence[str],
                spec: BootstrapSpec = DEFAULT_BOOTSTRAP, paired_seeds: bool = False, num: int = 1,
                den: int = 0) -> tuple:
    """sum(column ``num``) / sum(column ``den``) of arm A minus arm B (e.g. first-error step accuracy among rejected
    invalid proofs), with the clustered CI of ``eval.stats.paired_bootstrap``."""
    return paired_bootstrap([np.stack(a_seeds), np.stack(b_seeds)], clusters,
                            lambda s: safe_ratio(s[..., num], s[..., den]), spec, paired_seeds)


def _counts_of(name: str, total: dict[str, int]) -> dict[str, int]:
    m = METRICS[name]
    if isinstance(m, _Ratio):
        return {m.num: total[m.num], m.den: total[m.den]}
    return {**_counts_of(m.a, total), **_counts_of(m.b, total)}


def metric_table(rows: np.ndarray, clusters: Sequence[str], names: Sequence[str],
                 spec: BootstrapSpec | None = DEFAULT_BOOTSTRAP) -> dict[str, dict[str, Any]]:
    """``{metric: {"value", "counts", "ci"}}`` from per-record rows [N, len(COLUMNS)].

    >>> rows = np.array([[1,0,1,0,0,0,0,0,1,1,1]] * 3 + [[0,1,0,1,0,0,1,0,0,0,0]] * 2)
    >>> t = metric_table(rows, list("abcde"), ["rough.tpr", "rough.tnr", "rough.balanced_f1"], None)
    >>> {k: v["value"] for k, v in t.items()}
    {'rough.tpr': 1.0, 'rough.tnr': 1.0, 'rough.balanced_f1': 1.0}
    >>> t["rough.balanced_f1"]["counts"]
    {'tp': 3, 'pos': 3, 'tn': 2, 'neg': 2}
    """
    rows = np.asarray(rows, dtype=float).reshape(-1, len(COLUMNS))
    total = {c: int(v) for c, v in zip(COLUMNS, rows.sum(axis=0))}
    point = _values(rows.sum(axis=0, keepdims=True), names)
    boot = None
    if spec is not None and len(rows):
        boot = bootstrap_sums(rows, clusters, spec)
    boot_vals = _values(boot, names) if boot is not None else {}
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        v = float(point[name][0])
        ci: list[float | None] | None = None
        if spec is not None and len(rows):
            ci = list(percentile_ci(boot_vals[name], spec.level)) if boot is not None else [None, None]
        out[name] = {"value": None if np.isnan(v) else round(v, 12), "counts": _counts_of(name, total), "ci": ci}
    return out


@dataclass(frozen=True)
class ScoreOptions:
    """Options of ``score_predictions`` (mirrored in ``configs/score.yaml``)."""

    meta_threshold: MetaGrade = MetaGrade.BASIC_MATCH
    bootstrap: BootstrapSpec = field(default_factory=BootstrapSpec)
    breakdowns: tuple[str, ...] = ("split", "subject")
    k_curve: bool = True


def score_predictions(gold: Sequence[ProofTrajectory], preds: Mapping[str, Prediction],
                      opts: ScoreOptions = ScoreOptions()) -> dict[str, Any]:
    """All VerifierBench metrics for gold records that have a prediction.

    Returns ``{"n", "counts", "metrics": {name: {...}}, "breakdowns": {field: {value: {...}}},
    "k_curve": [...], "flip": {...}, "bootstrap": {...}}``; meta.* only when any prediction
    carries a ``meta_grade`` key.

    >>> from verifier.records import Annotation
    >>> g = [ProofTrajectory(f"r{i}", f"p{i}", "P", ("a", "b"), annotation=Annotation(first_fatal_error_step=i % 2 * 2 - 1))
    ...      for i in range(4)]
    >>> s = score_predictions(g, {r.id: Prediction(r.id, Verdict.VALID) for r in g}, ScoreOptions(bootstrap=BootstrapSpec(n=0)))
    >>> [s["metrics"][k]["value"] for k in ("rough.tpr", "rough.tnr", "rough.balanced_f1")]
    [1.0, 0.0, 0.0]
    """
    pairs = [(g, preds[g.id]) for g in gold if g.id in preds]
    rows = np.array([record_row(g, p, opts.meta_threshold) for g, p in pairs], dtype=float).reshape(-1, len(COLUMNS))
    clusters = [g.problem_id for g, _ in pairs]
    has_meta = any(p.has_meta for _, p in pairs)
    names = list(METRICS) if has_meta else _ROUGH_PB
    total = {c: int(v) for c, v in zip(COLUMNS, rows.sum(axis=0))}
    counts = {
        "n": len(pairs),
        "problems": len(set(clusters)),
        "valid": total["pos"],
        "invalid": total["neg"],
        "accepted": total["accept"],
        "unparsed_verdict": sum(1 for _, p in pairs if p.verdict is None),
        # failed passes by status (truncated: the budget was hit; unclosed_thinking: ended inside <think>)
        "failed_passes": dict(Counter(q.parse_status.value for _, p in pairs for q in p.passes if not q.parse_status.ok)),
        "processbench_skipped_unknown_step": sum(
            1 for g, _ in pairs if g.annotation is not None and g.annotation.fatal_step_unknown),
    }
    if has_meta:
        counts["meta_ungraded"] = sum(1 for _, p in pairs if p.meta_grade is None)
        counts["meta_grades"] = dict(Counter(p.meta_grade.value for _, p in pairs if p.meta_grade is not None))
    result: dict[str, Any] = {
        "n": len(pairs),
        "counts": counts,
        "metrics": metric_table(rows, clusters, names, opts.bootstrap),
        "meta_threshold": opts.meta_threshold.value if has_meta else None,
        "bootstrap": opts.bootstrap.to_dict(),
    }
    result["breakdowns"] = {}
    for fld in opts.breakdowns:
        groups: dict[str, list[int]] = {}
        for i, (g, _) in enumerate(pairs):
            groups.setdefault(_field(g, fld), []).append(i)
        result["breakdowns"][fld] = {
            key: {"n": len(idx), "metrics": metric_table(rows[idx], [clusters[i] for i in idx], names, opts.bootstrap)}
            for key, idx in sorted(groups.items())
        }
    if any(p.passes for _, p in pairs):
        result["flip"] = flip_rate([p.passes for _, p in pairs], clusters, opts.bootstrap)
        if opts.k_curve:
            result["k_curve"] = k_curve([g for g, _ in pairs], [p.passes for _, p in pairs], opts.bootstrap)
    return result


def _field(g: ProofTrajectory, name: str) -> str:
    v = getattr(g, name, None)
    if v is None:
        v = g.meta.get(name, "")
    return str(v) if str(v) else "(none)"


# --------------------------------------------------------------------------- passes


def k_curve(gold: Sequence[ProofTrajectory | None], passes: Sequence[Sequence[PassResult]],
            spec: BootstrapSpec | None = DEFAULT_BOOTSTRAP, majority: bool = True) -> list[dict[str, Any]]:
    """Pessimistic acceptance over the first k passes, k = 1..n, then majority over all n (section 4.4).

    Each row: ``{"k", "policy", "acceptance": {...}}`` plus the Rough and ProcessBench
    metrics when gold is given (``gold[i]`` None = no gold, e.g. ProverBench). A record
    with fewer than k passes (early-stopped judging) is still decided at k when one of its
    passes rejects (pessimism: rejected from that pass on); otherwise it is left out of
    row k and counted in ``undecided``.

    >>> P = lambda v: PassResult(0, Verdict(v))
    >>> rows = k_curve([None, None], [[P("valid"), P("valid")], [P("valid"), P("invalid")]], None)
    >>> [(r["policy"], r["k"], r["acceptance"]["value"]) for r in rows]
    [('pessimistic', 1, 1.0), ('pessimistic', 2, 0.5), ('majority', 2, 0.5)]
    >>> early = k_curve([None, None], [[P("invalid")], [P("valid"), P("valid")]], None, majority=False)
    >>> [(r["k"], r["acceptance"]["value"], r["undecided"]) for r in early]
    [(1, 0.5, 0), (2, 0.5, 0)]
    """
    n_max = max((len(p) for p in passes), default=0)
    clusters = [(g.problem_id if g is not None else str(i)) for i, g in enumerate(gold)]
    has_gold = any(g is not None for g in gold)
    policies = [("pessimistic", k) for k in range(1, n_max + 1)]
    if majority and n_max:
        policies.append(("majority", n_max))
    out = []
    for kind, k in policies:
        idx = [i for i, p in enumerate(passes)
               if len(p) >= k or (kind == "pessimistic" and any(not q.accepts for q in p))]
        decisions = [aggregate([q.as_output() for q in passes[i][:k]], AggregationPolicy(kind, n=k)) for i in idx]
        acc = np.array([[1, int(d.accepts)] for d in decisions], dtype=float).reshape(-1, 2)
        val = float(acc[:, 1].sum() / len(acc)) if len(acc) else None
        ci = None
        if spec is not None and len(acc):
            ci = list(cluster_bootstrap(acc, [clusters[i] for i in idx], lambda s: safe_ratio(s[:, 1], s[:, 0]), spec))
        row: dict[str, Any] = {"policy": kind, "k": k, "n": len(idx), "undecided": len(passes) - len(idx),
                               "acceptance": {"value": val, "counts": {"accepted": int(acc[:, 1].sum()), "n": len(acc)},
                                              "ci": ci}}
        if has_gold:
            gi = [(i, d) for i, d in zip(idx, decisions) if gold[i] is not None]
            rows = np.array([record_row(gold[i], Prediction(gold[i].id, d.verdict, d.first_error_step))  # type: ignore[arg-type]
                             for i, d in gi], dtype=float).reshape(-1, len(COLUMNS))
            row["metrics"] = metric_table(rows, [clusters[i] for i, _ in gi], _ROUGH_PB, spec)
        out.append(row)
    return out


def flip_rate(passes: Sequence[Sequence[PassResult]], clusters: Sequence[str] | None = None,
              spec: BootstrapSpec | None = DEFAULT_BOOTSTRAP) -> dict[str, Any]:
    """Judge noise across passes (ProofJudge, section 3) with clustered CIs.

    Point values are ``eval.stats.flip_rate`` over the parsed verdicts: ``pairwise`` =
    disagreeing pass pairs / all pass pairs, ``unstable`` = records whose passes are not
    unanimous (records with fewer than two parsed passes are left out and counted).

    >>> P = lambda v: PassResult(0, Verdict(v))
    >>> f = flip_rate([[P("valid")] * 3, [P("valid"), P("invalid"), P("invalid")]], spec=None)
    >>> f["pairwise"]["value"], f["unstable"]["value"], f["pairwise"]["counts"]
    (0.333333333333, 0.5, {'disagreeing_pairs': 2, 'pairs': 6})
    """
    verdicts = [[p.verdict.value if p.parse_status.ok and p.verdict is not None else None for p in ps]
                for ps in passes]
    point = _stats_flip_rate(verdicts)
    rows, keep = [], []
    for i, vs in enumerate(verdicts):
        ok = [v for v in vs if v is not None]
        m = len(ok)
        if m < 2:
            continue
        a = ok.count("valid")
        rows.append([a * (m - a), m * (m - 1) // 2, int(0 < a < m), 1])
        keep.append(i)
    arr = np.array(rows, dtype=float).reshape(-1, 4)
    s = arr.sum(axis=0) if len(arr) else np.zeros(4)
    cl = [(clusters[i] if clusters is not None else str(i)) for i in keep]
    out: dict[str, Any] = {}
    for name, num, den, labels in (("pairwise", 0, 1, ("disagreeing_pairs", "pairs")),
                                   ("unstable", 2, 3, ("unstable", "records"))):
        ci = None
        if spec is not None and len(arr):
            ci = list(cluster_bootstrap(arr, cl, lambda b, n=num, d=den: safe_ratio(b[:, n], b[:, d]), spec))
        out[name] = {"value": point[name], "counts": {labels[0]: int(s[num]), labels[1]: int(s[den])}, "ci": ci}
    out["records_with_fewer_than_2_parsed_passes"] = len(passes) - len(keep)
    return out


# --------------------------------------------------------------------------- ProverBench


def acceptance_table(records: Sequence[ProofTrajectory], accepted: Sequence[bool],
                     spec: BootstrapSpec | None = DEFAULT_BOOTSTRAP,
                     breakdowns: Sequence[str] = ("split", "subject")) -> dict[str, Any]:
    """ProverBench score (Table 1): share of generated proofs accepted by the (pessimistic) verifier.

    Overall and per split / subject, with clustered CIs.

    >>> rs = [ProofTrajectory(f"{i}", f"p{i}", "P", ("s",), split="UG" if i < 2 else "QE") for i in range(4)]
    >>> t = acceptance_table(rs, [True, False, True, True], None)
    >>> t["overall"]["value"], t["split"]["QE"]["value"], t["split"]["UG"]["counts"]
    (0.75, 1.0, {'accepted': 1, 'n': 2})
    """
    if len(records) != len(accepted):
        raise ValueError(f"{len(records)} records but {len(accepted)} decisions")

    def one(idx: list[int]) -> dict[str, Any]:
        arr = np.array([[1, int(accepted[i])] for i in idx], dtype=float).reshape(-1, 2)
        n, a = len(idx), int(arr[:, 1].sum())
        ci = None
        if spec is not None and n:
            ci = list(cluster_bootstrap(arr, [records[i].problem_id for i in idx],
                                        lambda s: safe_ratio(s[:, 1], s[:, 0]), spec))
        return {"value": a / n if n else None, "counts": {"accepted": a, "n": n}, "ci": ci}

    out: dict[str, Any] = {"overall": one(list(range(len(records))))}
    for fld in breakdowns:
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(records):
            groups.setdefault(_field(r, fld), []).append(i)
        out[fld] = {k: one(v) for k, v in sorted(groups.items())}
    return out


# --------------------------------------------------------------------------- ids


@dataclass
class Alignment:
    """Which gold ids have predictions (``eval.score``'s id check)."""

    common: list[str]
    missing_predictions: list[str] = field(default_factory=list)  # gold ids without a prediction
    unknown_predictions: list[str] = field(default_factory=list)  # prediction ids not in gold

    def to_dict(self) -> dict[str, Any]:
        return {"matched": len(self.common), "missing_predictions": self.missing_predictions,
                "unknown_predictions": self.unknown_predictions}


def align_ids(gold_ids: Sequence[str], pred_ids: Sequence[str], allow_missing: bool = False) -> Alignment:
    """Match ids; an id in one file and not the other raises, naming it, unless ``allow_missing``.

    >>> align_ids(["a", "b"], ["a"], allow_missing=True).missing_predictions
    ['b']
    >>> align_ids(["a", "b"], ["a", "c"])
    Traceback (most recent call last):
    ...
    verifier.records.RecordError: record 'b', field 'id': in gold but not in predictions (1 such id(s); and 1 prediction id(s) not in gold, first 'c'; pass allow_missing=true to count and report them instead)
    """
    ps = set(pred_ids)
    gs = set(gold_ids)
    missing = [i for i in gold_ids if i not in ps]
    unknown = [i for i in pred_ids if i not in gs]
    if (missing or unknown) and not allow_missing:
        parts = []
        if missing:
            first, what = missing[0], "in gold but not in predictions"
            parts.append(f"{len(missing)} such id(s)")
            if unknown:
                parts.append(f"and {len(unknown)} prediction id(s) not in gold, first {unknown[0]!r}")
        else:
            first, what = unknown[0], "in predictions but not in gold"
            parts.append(f"{len(unknown)} such id(s)")
        raise RecordError(first, "id", f"{what} ({'; '.join(parts)}; pass allow_missing=true to count and "
                                       "report them instead)")
    return Alignment([i for i in gold_ids if i in ps], missing, unknown)
