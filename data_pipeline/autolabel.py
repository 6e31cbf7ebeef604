"""Expert-free labelling of a prover's proofs by verification and meta-verification: the automatic labelling of
DeepSeekMath-V2 ("Towards Self-Verifiable Mathematical Reasoning", 2025), the alternative to the expert
annotation of sections 3.1, 4.1 and appendix C.

``python -m data_pipeline.autolabel trajectories=PATH out=DIR endpoint.base_url=URL endpoint.model=V
meta.endpoint.base_url=URL2 meta.endpoint.model=M n=8 m=3 k=4``

1. **Analyses.** Each proof is verified ``n`` times by the verifier (the one runner ``verifier.runner.judge``,
   the one judge config ``judge``, all ``n`` passes: ``judge.early_stop=true`` is refused): each pass is one
   analysis, with its verdict, first error step and rationale.
2. **Meta-verification.** Each analysis that reports an issue (verdict ``invalid``) is graded ``m`` times by
   the meta-verifier (``verifier.meta_verifier``, one ``grade_batch`` interface, as the runner's post-step;
   the LLM one with ``meta.template=meta_verify_analysis`` checks the reported issue against the proof itself,
   no annotation needed). It is **valid** when a strict majority of its ``m`` grades is at least
   ``min_grade``; an accepting analysis reports nothing to confirm and is valid as it stands; an unparseable
   pass is no analysis.
3. **The rule** (``label_proof``, pure). Scores: an accepting analysis 1, a rejecting one 0.
   ``k_of=valid`` (default): with at least ``k`` valid analyses the proof takes the LOWEST score among them —
   invalid when a valid analysis rejects it (first error step by ``judge.step_rule`` among the valid
   rejecting analyses, that analysis's rationale as the reviewer comment), valid when every valid analysis
   accepts it; an invalid analysis is ignored. ``k_of=lowest_score`` (closer to DeepSeekMath-V2's wording:
   the analyses that give the lowest score must include ``k`` valid ones): the lowest score is taken over
   all parsed analyses, so a refuted rejection leaves the proof undecided instead of being outvoted.
   Fewer than ``k``: **undecided** (reason ``too_few_valid``); also undecided: ``meta_failed`` (a grade is
   missing: re-run), ``too_long``, ``request_failed`` (re-run).

Outputs in ``out``: ``judgments.jsonl`` (the runner's rows: every pass and, per pass, its meta grades under
``analysis_meta``), ``labelled.jsonl`` (annotated trajectories as every later command reads them: the
annotation's ``first_fatal_error_step`` and ``reviewer_comment``; provenance in ``meta.autolabel``:
``labelled_by``, ``n``, ``m``, ``k``, the valid analyses and every analysis's grades), ``undecided.jsonl``
(the same trajectories unannotated, with the reason in ``meta.autolabel``), ``autolabel_summary.json`` (every
count; with ``truth=synthetic|annotation``, ``measure``: the labels against known truth). Resumable: a re-run
judges only the proofs without a row and re-grades only the missing meta grades (``m`` raised later: only the
extra grades); the label files are rebuilt from all rows.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from data_pipeline.synthetic_check import check_proof
from verifier.aggregate import reported_step
from verifier.config import EndpointConfig, MetaVerifierConfig, hydra_main
from verifier.engine import OpenAIEngine
from verifier.errors import InputError
from verifier.formats import load_any
from verifier.io import write_jsonl
from verifier.judging import JudgeConfig, PassCache
from verifier.judgment import Judgment
from verifier.meta_verifier import MetaVerifier, make_meta_verifier
from verifier.outputs import holds_output
from verifier.records import (NO_STEP, Annotation, MetaGrade, ParseStatus, ProofTrajectory, RecordError, Verdict,
                              VerificationOutput)
from verifier.runner import done_ids, judge, read_judgments
from verifier.templates import meta_verification_prompt

UNDECIDED_REASONS = ("too_few_valid", "meta_failed", "too_long", "request_failed")
K_OF = ("valid", "lowest_score")
TRUTH = ("none", "synthetic", "annotation")


@dataclass
class AutolabelConfig:
    """Options of ``python -m data_pipeline.autolabel`` (mirrored by ``configs/autolabel.yaml``)."""

    trajectories: str | None = None  # the proofs to label (JSONL, ingested folder or parquet)
    out: str | None = None
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)  # the verifier
    judge: JudgeConfig = field(default_factory=JudgeConfig)  # the one judge config; judge.n is n, no early stop
    meta: MetaVerifierConfig = field(default_factory=lambda: MetaVerifierConfig(
        kind="llm", endpoint=EndpointConfig(base_url="http://127.0.0.1:8001/v1", model="meta-verifier"),
        temperature=1.0, template="meta_verify_analysis"))  # m samples per analysis: sampled, not greedy
    n: int = 8  # analyses (verifier passes) per proof
    m: int = 3  # meta-verifications per analysis that reports an issue
    k: int = 4  # valid analyses a label needs
    min_grade: str = "BASIC_MATCH"  # a meta grade at least this confirms the analysis
    k_of: str = "valid"  # valid: k of all valid analyses | lowest_score: k of the lowest-scoring ones
    cache: str | None = None  # SQLite pass cache of the verifier passes (verifier.judging.PassCache)
    truth: str = "none"  # none | synthetic (data_pipeline.synthetic_check) | annotation: measure the labels
    meta_probe: int = 8  # judge these first proofs, then refuse a meta-verifier that does not grade (0: off)
    max_meta_failed: float = 0.5  # the probe's share of meta-verifications without a grade allowed
    progress: bool = True


# ------------------------------------------------------------------------------------- the rule


@dataclass(frozen=True)
class Analysis:
    """One verification of a proof (a verifier pass) and the meta grades of what it reports."""

    index: int
    verdict: Verdict | None  # None: the pass did not parse (no analysis)
    first_error_step: int = NO_STEP
    rationale: str = ""
    grades: tuple[MetaGrade | None, ...] = ()  # m grades when it rejects (None: a failed meta-verification)

    @property
    def score(self) -> int:
        return int(self.verdict is Verdict.VALID)


@dataclass(frozen=True)
class Label:
    """The rule's answer: ``decision`` valid | invalid | undecided (with ``reason``); the analysis the label
    takes (its step and rationale) and the valid analyses' indices."""

    decision: str
    reason: str = ""
    first_error_step: int = NO_STEP
    reviewer_comment: str = ""
    analysis: int | None = None
    valid: tuple[int, ...] = ()


def confirmed(grades: Sequence[MetaGrade | None], min_grade: MetaGrade = MetaGrade.BASIC_MATCH) -> bool:
    """A strict majority of the meta grades at least ``min_grade`` (a failed grade does not confirm).

    >>> E, P = MetaGrade.EXACT_MATCH, MetaGrade.POOR_MATCH
    >>> confirmed([E, E, P]), confirmed([E, P]), confirmed([E, None, None]), confirmed([])
    (True, False, False, False)
    """
    return 2 * sum(g is not None and g >= min_grade for g in grades) > len(grades)


def is_valid_analysis(a: Analysis, min_grade: MetaGrade = MetaGrade.BASIC_MATCH) -> bool:
    """An accepting analysis is valid as it stands; a rejecting one when its meta grades confirm it."""
    if a.verdict is None:
        return False
    return a.verdict is Verdict.VALID or confirmed(a.grades, min_grade)


def label_proof(analyses: Sequence[Analysis], k: int, min_grade: MetaGrade = MetaGrade.BASIC_MATCH,
                k_of: str = "valid", step_rule: str = "earliest") -> Label:
    """The proof's label from its analyses (module docstring, step 3).

    >>> from verifier.records import Verdict as V
    >>> E, W = MetaGrade.EXACT_MATCH, MetaGrade.WRONG_POLARITY
    >>> ok, bad = Analysis(0, V.VALID, rationale="fine"), Analysis(1, V.INVALID, 2, "step 2 is wrong", (E, E, W))
    >>> label_proof([ok, bad], k=2).decision, label_proof([ok, bad], k=2).first_error_step
    ('invalid', 2)
    >>> label_proof([ok, bad], k=3).reason
    'too_few_valid'
    """
    if k_of not in K_OF:
        raise InputError(f"autolabel config, field 'k_of': use {' or '.join(K_OF)}, got {k_of!r}")
    parsed = [a for a in analyses if a.verdict is not None]
    if any(a.verdict is Verdict.INVALID and None in a.grades for a in parsed):
        return Label("undecided", "meta_failed")
    valid = [a for a in parsed if is_valid_analysis(a, min_grade)]
    idx = tuple(a.index for a in valid)
    if not valid:
        return Label("undecided", "too_few_valid", valid=idx)
    low = min(a.score for a in (valid if k_of == "valid" else parsed))
    pool = [a for a in valid if a.score == low]
    if len(valid if k_of == "valid" else pool) < k:
        return Label("undecided", "too_few_valid", valid=idx)
    if low == 1:
        return Label("valid", reviewer_comment=pool[0].rationale, analysis=pool[0].index, valid=idx)
    steps = [a.first_error_step for a in pool if a.first_error_step >= 0]
    step = reported_step(steps, step_rule) if steps else NO_STEP
    a = next(a for a in pool if a.first_error_step == step)
    return Label("invalid", first_error_step=step, reviewer_comment=a.rationale, analysis=a.index, valid=idx)


# ------------------------------------------------------------------------------ measured against truth


def measure(labels: Mapping[str, tuple[str, int]], truth: Mapping[str, tuple[bool, int] | None]) -> dict[str, Any]:
    """Labels against exact truth, over the proofs whose truth is known (``truth[id]``: (valid, first fatal
    step), None: unknown). ``labels[id]``: (decision, first error step); a missing id is undecided.

    ``coverage``: share labelled; ``precision_invalid`` / ``recall_invalid``: of "invalid" among the labelled
    proofs (``recall_invalid_all``: of every truly invalid proof, undecided ones counted as missed);
    ``exact_first_step``: of the truly invalid proofs labelled invalid whose true step is known, the share
    labelled with exactly that step; ``accuracy``: of the labelled. A rate without cases is None.

    >>> m = measure({"a": ("invalid", 2), "b": ("valid", -1), "c": ("undecided", -1)},
    ...             {"a": (False, 2), "b": (False, 0), "c": (True, -1), "d": None})
    >>> m["coverage"], m["precision_invalid"], m["recall_invalid"], m["exact_first_step"], m["no_truth"]
    (0.6666666666666666, 1.0, 0.5, 1.0, 1)
    """
    c = Counter()
    for pid, t in truth.items():
        if t is None:
            c["no_truth"] += 1
            continue
        true_valid, true_step = t
        decision, step = labels.get(pid, ("undecided", NO_STEP))
        c["proofs"] += 1
        c["truly_invalid"] += not true_valid
        if decision not in ("valid", "invalid"):
            c["undecided"] += 1
            continue
        c["labelled"] += 1
        key = ("t" if (decision == "invalid") != true_valid else "f") + ("p" if decision == "invalid" else "n")
        c[key] += 1
        if key == "tp" and true_step >= 0:
            c["step_known"] += 1
            c["step_exact"] += step == true_step

    def rate(a: str, *b: str) -> float | None:
        d = sum(c[x] for x in b)
        return c[a] / d if d else None

    return {"proofs": c["proofs"], "no_truth": c["no_truth"], "labelled": c["labelled"], "undecided": c["undecided"],
            "coverage": rate("labelled", "proofs"), "precision_invalid": rate("tp", "tp", "fp"),
            "recall_invalid": rate("tp", "tp", "fn"), "recall_invalid_all": rate("tp", "truly_invalid"),
            "exact_first_step": rate("step_exact", "step_known"),
            "accuracy": (c["tp"] + c["tn"]) / c["labelled"] if c["labelled"] else None,
            "confusion": {k: c[k] for k in ("tp", "fp", "fn", "tn")}, "exact_first_step_of": c["step_known"]}


# one row per proof: [proofs, labelled, tp, fp, fn, tn, truly_invalid, step_known, step_exact]
MEASURE_COLUMNS = ("proofs", "labelled", "tp", "fp", "fn", "tn", "truly_invalid", "step_known", "step_exact")


def measure_row(label: tuple[str, int], truth: tuple[bool, int]) -> list[int]:
    """One proof's counts (``MEASURE_COLUMNS``) of its label against exact truth: what ``measure`` sums, kept per
    proof so that a bootstrap can resample problems.

    >>> measure_row(("invalid", 2), (False, 2)), measure_row(("undecided", -1), (True, -1))
    ([1, 1, 1, 0, 0, 0, 1, 1, 1], [1, 0, 0, 0, 0, 0, 0, 0, 0])
    """
    decision, step = label
    true_valid, true_step = truth
    row = dict.fromkeys(MEASURE_COLUMNS, 0)
    row["proofs"], row["truly_invalid"] = 1, int(not true_valid)
    if decision in ("valid", "invalid"):
        row["labelled"] = 1
        row[("t" if (decision == "invalid") != true_valid else "f") + ("p" if decision == "invalid" else "n")] = 1
        if decision == "invalid" and not true_valid and true_step >= 0:
            row["step_known"], row["step_exact"] = 1, int(step == true_step)
    return [row[c] for c in MEASURE_COLUMNS]


def synthetic_truth(t: ProofTrajectory) -> tuple[bool, int] | None:
    """(valid, first wrong step) of a proof of a synthetic problem by the exact checker; None for another problem."""
    c = check_proof(t.problem, t.proof_steps)
    return None if c.kind == "not_a_problem" else (c.true, c.step)


def annotation_truth(t: ProofTrajectory) -> tuple[bool, int] | None:
    """(valid, first fatal step) of the record's own annotation; None without one or for an error case."""
    a = t.annotation
    return None if a is None or a.report_error_case else (a.is_valid, a.first_fatal_error_step)


TRUTH_OF: dict[str, Callable[[ProofTrajectory], tuple[bool, int] | None]] = {
    "synthetic": synthetic_truth, "annotation": annotation_truth}


# ------------------------------------------------------------------------------------- the runner's rows


def _grade(g: Any) -> MetaGrade | None:
    return None if not isinstance(g, Mapping) or g.get("grade") is None else MetaGrade.parse(g["grade"])


def analyses_of(row: Mapping[str, Any], m: int) -> list[Analysis]:
    """The analyses of a runner row: its passes and, per rejecting pass, its first ``m`` meta grades."""
    j = Judgment.from_row(row)
    metas = row.get("analysis_meta") or []
    out = []
    for i, p in enumerate(j.passes):
        verdict = p.verdict if p.ok else None
        stored = (metas[i] if i < len(metas) else None) or []
        grades = tuple(_grade(g) for g in stored[:m]) + (None,) * max(0, m - len(stored))
        out.append(Analysis(i, verdict, p.first_error_step, p.rationale,
                            grades if verdict is Verdict.INVALID else ()))
    return out


def meta_post(meta: MetaVerifier, m: int):
    """The runner's post-step: ``m`` meta grades of each rejecting pass (``analysis_meta``, aligned with the
    passes); grades already in the row are kept, so a re-run grades only the missing ones. Each meta sample has
    its own seed stream (record id ``<id>/a<pass>/m<j>``)."""

    async def post(t: ProofTrajectory, row: dict[str, Any]) -> dict[str, Any]:
        j = Judgment.from_row(row)
        old = row.get("analysis_meta") or []
        metas: list[list[dict[str, Any]] | None] = [None] * len(j.passes)
        todo: list[tuple[ProofTrajectory, VerificationOutput]] = []
        where: list[tuple[int, int]] = []
        for i, p in enumerate(j.passes):
            if not (p.ok and p.verdict is Verdict.INVALID):
                continue
            have = list((old[i] if i < len(old) else None) or [])[:m]
            metas[i] = have + [{"grade": None}] * (m - len(have))
            for s, g in enumerate(metas[i]):
                if _grade(g) is None:
                    todo.append((dataclasses.replace(t, id=f"{t.id}/a{i}/m{s}"), p))
                    where.append((i, s))
        if todo:
            for (i, s), g in zip(where, await meta.agrade_batch(todo)):
                metas[i][s] = {"grade": None if g.grade is None else g.grade.value, "status": g.status.value,  # type: ignore[index]
                               "rationale": g.rationale}
        return {"analysis_meta": metas}

    return post


def graded(m: int) -> Callable[[Mapping[str, Any]], bool]:
    """``post_ok``: every rejecting pass has ``m`` meta grades (a row missing one is re-graded on resume)."""
    return lambda row: all(None not in a.grades for a in analyses_of(row, m) if a.verdict is Verdict.INVALID)


# ----------------------------------------------------------------------------------------- the command


def min_grade_of(cfg: AutolabelConfig) -> MetaGrade:
    try:
        return MetaGrade.parse(cfg.min_grade)
    except RecordError:
        raise InputError(f"autolabel config, field 'min_grade': use one of {', '.join(MetaGrade.__members__)}, "
                         f"got {cfg.min_grade!r}") from None


def check_config(cfg: AutolabelConfig) -> None:
    """Every key checked before any request, each error naming its key."""
    if not cfg.trajectories or not cfg.out:
        raise InputError("autolabel config: trajectories=PATH and out=DIR are required")
    bad = [(key, why) for key, ok, why in (
        ("n", cfg.n >= 1, f"must be >= 1, got {cfg.n}"),
        ("judge.n", cfg.judge.n == cfg.n, f"is {cfg.judge.n} but n={cfg.n}: the analyses per proof are n "
                                          "(judge.n follows it)"),
        ("judge.early_stop", not cfg.judge.early_stop, "must be false: the rule needs all n analyses"),
        ("m", cfg.m >= 1, f"must be >= 1, got {cfg.m}"),
        ("k", 1 <= cfg.k <= cfg.n, f"must be between 1 and n={cfg.n}, got {cfg.k}"),
        ("k_of", cfg.k_of in K_OF, f"use {' or '.join(K_OF)}, got {cfg.k_of!r}"),
        ("truth", cfg.truth in TRUTH, f"use {', '.join(TRUTH)}, got {cfg.truth!r}"),
    ) if not ok]
    if bad:
        raise InputError(f"autolabel config, field {bad[0][0]!r}: {bad[0][1]}")
    min_grade_of(cfg)
    cfg.judge.aggregation()  # judge.step_rule / policy checks


class MetaVerifierSilent(InputError):
    """The labeller's meta-verifier gives no grade for most of the probe's meta-verifications."""


def check_meta_grades(rows: Iterable[Mapping[str, Any]], cfg: AutolabelConfig) -> dict[str, int]:
    """The meta-verifier must grade: of the meta-verifications in ``rows`` (the probe's first ``meta_probe``
    proofs), at most ``max_meta_failed`` may come back without a grade. Otherwise every rejecting analysis is
    unconfirmed, and the only labels left are "valid" by unanimous acceptance: the labels that teach a verifier
    to accept false proofs. One error naming the meta-verifier and the statuses; returns the counts."""
    c: Counter = Counter()
    for row in rows:
        for grades in row.get("analysis_meta") or []:
            for g in grades or []:
                c["meta-verifications"] += 1
                if _grade(g) is None:
                    c["no grade"] += 1
                    c[f"status:{(g or {}).get('status') or 'failed'}"] += 1
    n, bad = c["meta-verifications"], c["no grade"]
    if n and bad > cfg.max_meta_failed * n:
        why = ", ".join(f"{k[7:]} {v}" for k, v in sorted(c.items()) if k.startswith("status:"))
        raise MetaVerifierSilent(f"autolabel: the meta-verifier {meta_name(cfg)!r} gave no grade for {bad} of {n} "
                         f"meta-verifications of the first {cfg.meta_probe} proofs ({why}), more than "
                         f"max_meta_failed={cfg.max_meta_failed}: it is not trained for meta.template="
                         f"{cfg.meta.template} or meta.max_tokens={cfg.meta.max_tokens} is too small; its labels "
                         "would rest on unanimous acceptance alone")
    return dict(c)


def check_meta(cfg: AutolabelConfig, trajs: Sequence[ProofTrajectory]) -> None:
    """The meta-verifier can grade these records: ``meta.kind=rule`` (and the B.3 template) grade against an
    expert annotation, so on records without one they are refused before any request."""
    bare = next((t for t in trajs if t.annotation is None), None)
    if cfg.meta.kind == "rule" and bare is not None:
        raise InputError(f"autolabel config, field 'meta.kind': rule grades against an expert annotation and record "
                         f"{bare.id!r} has none; use meta.kind=llm meta.template=meta_verify_analysis")
    if cfg.meta.kind == "llm" and trajs:
        probe = VerificationOutput(ParseStatus.OK, Verdict.INVALID, 0, "probe")
        try:
            meta_verification_prompt(bare or trajs[0], probe, template=cfg.meta.template)
        except (InputError, jinja2.TemplateNotFound) as e:
            raise InputError(f"autolabel config, field 'meta.template': {cfg.meta.template!r} cannot grade record "
                             f"{(bare or trajs[0]).id!r} ({e}); use meta.template=meta_verify_analysis") from None


def meta_name(cfg: AutolabelConfig) -> str:
    return "rule" if cfg.meta.kind == "rule" else f"llm:{cfg.meta.template}:{cfg.meta.endpoint.model}"


def check_resume(path: Path, cfg: AutolabelConfig) -> None:
    """Rows already in ``judgments.jsonl`` must come from this n and this meta-verifier (else another ``out``)."""
    for rid, j in read_judgments(path).items():
        if j.n != cfg.n:
            raise InputError(f"autolabel config, field 'n': {path} holds record {rid!r} judged with n={j.n}, "
                             f"not n={cfg.n}; use another out=DIR")
        if j.columns.get("meta_verifier", meta_name(cfg)) != meta_name(cfg):
            raise InputError(f"autolabel config, field 'meta': {path} holds record {rid!r} graded by "
                             f"{j.columns['meta_verifier']!r}, not {meta_name(cfg)!r}; use another out=DIR")


def record_of(t: ProofTrajectory, lab: Label, analyses: Sequence[Analysis], cfg: AutolabelConfig) -> dict[str, Any]:
    """The trajectory as the pipeline reads it: annotated when labelled; provenance in ``meta.autolabel``."""
    prov: dict[str, Any] = {
        "labelled_by": "autolabel", "verifier": cfg.judge.model or cfg.endpoint.model, "meta_verifier": meta_name(cfg),
        "n": cfg.n, "m": cfg.m, "k": cfg.k, "min_grade": min_grade_of(cfg).value, "k_of": cfg.k_of,
        "decision": lab.decision, "reason": lab.reason, "analysis": lab.analysis, "valid_analyses": list(lab.valid),
        "analyses": [{"index": a.index, "verdict": None if a.verdict is None else a.verdict.value,
                      "first_error_step": a.first_error_step, "grades": [g and g.value for g in a.grades],
                      "valid": a.index in lab.valid} for a in analyses]}
    d = t.to_dict()
    d.pop("annotation", None)
    if t.annotation is not None:
        prov["replaced_annotation"] = t.annotation.to_dict()
    if lab.decision in ("valid", "invalid"):
        d["annotation"] = Annotation(reviewer_comment=lab.reviewer_comment, first_fatal_error_step=lab.first_error_step,
                                     fatal_step_unknown=lab.decision == "invalid" and lab.first_error_step < 0
                                     ).to_dict()
    d["meta"] = {**t.meta, "autolabel": prov}
    return d


@holds_output()
def run(cfg: AutolabelConfig) -> dict[str, Any]:
    """Judge (n analyses), meta-verify (m grades per rejecting analysis), label; write the files and summary."""
    check_config(cfg)
    out = Path(cfg.out)  # type: ignore[arg-type]
    trajs = load_any(cfg.trajectories).records  # type: ignore[arg-type]
    check_meta(cfg, trajs)
    path = out / "judgments.jsonl"
    check_resume(path, cfg)
    min_grade = min_grade_of(cfg)
    cache = PassCache(cfg.cache) if cfg.cache else None
    engine, post = OpenAIEngine(cfg.endpoint), meta_post(make_meta_verifier(cfg.meta), cfg.m)

    def run_judge(items: Sequence[ProofTrajectory], desc: str) -> Any:
        return judge(items, engine, cfg.judge, path, cache=cache, progress=cfg.progress,
                     columns=lambda t: {"problem_id": t.problem_id, "meta_verifier": meta_name(cfg)},
                     post=post, post_ok=graded(cfg.m), desc=desc)

    try:
        if cfg.meta_probe > 0 and len(done_ids(path)) < cfg.meta_probe:  # a fresh run: refuse a meta-verifier
            # that gives no grade before the whole set is judged (the probe's rows are kept and resumed)
            check_meta_grades(run_judge(trajs[:cfg.meta_probe], "autolabel: meta probe").rows.values(), cfg)
        res = run_judge(trajs, f"autolabel: n={cfg.n} m={cfg.m}")
    finally:
        if cache is not None:
            cache.close()
    labelled, undecided, decisions = [], [], {}
    c: Counter = Counter()
    grades: Counter = Counter()
    for t in trajs:
        row = res.rows.get(t.id)
        analyses = analyses_of(row, cfg.m) if row is not None else []
        if row is None:
            lab = Label("undecided", "request_failed")
        elif row.get("status") == "too_long":
            lab = Label("undecided", "too_long")
        else:
            lab = label_proof(analyses, cfg.k, min_grade, cfg.k_of, cfg.judge.step_rule)
        (labelled if lab.decision != "undecided" else undecided).append(record_of(t, lab, analyses, cfg))
        decisions[t.id] = (lab.decision, lab.first_error_step)
        c[lab.decision] += 1
        c[f"reason:{lab.reason}"] += lab.decision == "undecided"
        c["fatal_step_unknown"] += lab.decision == "invalid" and lab.first_error_step < 0
        for a in analyses:
            c["analyses"] += 1
            c["unparseable" if a.verdict is None else "accepting" if a.score else "reporting_issue"] += 1
            if a.verdict is Verdict.INVALID:
                c["confirmed" if None not in a.grades and confirmed(a.grades, min_grade) else
                  "meta_failed" if None in a.grades else "refuted"] += 1
                grades.update("null" if g is None else g.value for g in a.grades)
    write_jsonl(out / "labelled.jsonl", labelled)
    write_jsonl(out / "undecided.jsonl", undecided)
    s = res.summary
    summary: dict[str, Any] = {
        "trajectories": len(trajs), "labelled": len(labelled), "valid": c["valid"], "invalid": c["invalid"],
        "invalid_fatal_step_unknown": c["fatal_step_unknown"], "undecided": len(undecided),
        "coverage": len(labelled) / len(trajs) if trajs else None,
        "undecided_by_reason": {r: c[f"reason:{r}"] for r in UNDECIDED_REASONS},
        "analyses": {k: c[k] for k in ("analyses", "unparseable", "accepting", "reporting_issue", "confirmed",
                                       "refuted", "meta_failed")},
        "meta_grades": {g: grades[g] for g in [*MetaGrade.__members__, "null"]},
        "rule": {"n": cfg.n, "m": cfg.m, "k": cfg.k, "min_grade": min_grade.value, "k_of": cfg.k_of,
                 "step_rule": cfg.judge.step_rule},
        "verifier": {"model": cfg.judge.model or cfg.endpoint.model, "template": cfg.judge.template,
                     "with_reference": cfg.judge.with_reference},
        "meta_verifier": {"kind": cfg.meta.kind, "name": meta_name(cfg)},
        "runner": {k: s[k] for k in ("records", "already_done", "judged", "failed", "too_long", "post_redone",
                                     "post_failed", "generated_passes", "cached_passes")},
        "truth": cfg.truth,
        "measure": None if cfg.truth == "none" else measure(decisions, {t.id: TRUTH_OF[cfg.truth](t) for t in trajs}),
        "files": {"judgments": str(path), "labelled": str(out / "labelled.jsonl"),
                  "undecided": str(out / "undecided.jsonl")},
    }
    (out / "autolabel_summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


def main() -> None:
    """Hydra app: ``python -m data_pipeline.autolabel trajectories=PATH out=DIR endpoint.* meta.* n= m= k=``."""

    @hydra_main("autolabel", AutolabelConfig)
    def _run(cfg: AutolabelConfig) -> None:
        s = run(cfg)
        print(f"autolabel: labelled {s['labelled']} of {s['trajectories']} proofs (valid {s['valid']}, invalid "
              f"{s['invalid']}); undecided {s['undecided']} {s['undecided_by_reason']}; "
              f"labels: {Path(cfg.out) / 'labelled.jsonl'}")  # type: ignore[arg-type]

    _run()


if __name__ == "__main__":
    main()
