"""VerifierBench run: judge every annotated trajectory, meta-verify, score, report (sections 3.3, 5.3, 5.4).

``python -m eval.verifierbench data=PATH out=DIR verifier.base_url=URL verifier.model=NAME
[judge.n=8 judge.policy=pessimistic] [meta.kind=rule|llm meta.endpoint.base_url=URL ...]``

``python -m eval.verifierbench data=PATH out=DIR engine=offline offline.model=CHECKPOINT_DIR [offline.*=...]``
judges with an in-process ``vllm.LLM`` (``verifier.offline``) on a checkpoint instead of a served
endpoint: how ``training/grpo.py`` evaluates its saved ``DIR/final`` on the held-out set.

1. The verifier (endpoint or offline engine) judges each trajectory with ``judge.n`` passes under
   ``judge.policy`` (``verifier.judging``: seeds per pass, pass cache, early stop off by default).
2. The meta-verifier (``verifier.meta_verifier``: the B.3 prompt on its own endpoint, or the
   rule-based one) grades the verification that carries the decision: for a rejection the
   rejecting pass whose first error step became the aggregated step, for an acceptance the
   first accepting pass (``meta_pass`` in the row). A failed grade is null and counted.
3. ``DIR/judgments.jsonl`` (one row per trajectory, the ``eval.judge`` format plus
   ``meta_grade``) is written by the one runner (``verifier.runner.judge``, post-step = the
   meta grade) as each judgment completes: a killed run resumes where it stopped (finished
   ids are skipped; passes come back from ``DIR/pass_cache.sqlite``) and re-grades the rows
   whose meta grade is null; ``run.meta_failed`` in ``metrics.json`` counts grades still null.
4. Scoring (``eval.metrics``, as ``eval.score`` does) on the runner's results in memory: ``DIR/metrics.json``, ``DIR/report.md``, plots, W&B
   (``verifier.results``). ``grade_every_pass=true`` also meta-grades every pass: ``per_pass``
   (each pass scored as its own verdict), ``mean_reward`` (the GRPO meta reward per pass,
   unparseable = 0), ``per_record_reward``, ``per_record_problem`` and ``parse_failure_rate`` in metrics.json.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Sequence

from eval.browse import write_browser
from eval.metrics import Prediction, ScoreOptions, align_ids, score_predictions
from eval.score import ScoreConfig, flatten, options
from eval.stats import BOOTSTRAP_RENAMED, BootstrapSpec
from verifier.card import inherit
from verifier.config import EndpointConfig, MetaVerifierConfig, hydra_main
from verifier.engine import Engine, OpenAIEngine
from verifier.errors import InputError
from verifier.formats import load_any
from verifier.judging import JudgeConfig, PassCache
from verifier.judgment import Judgment
from verifier.meta_verifier import make_meta_verifier
from verifier.offline import OfflineConfig, VLLMOfflineEngine
from verifier.outputs import holds_output
from verifier.records import (
    NO_STEP,
    MetaGrade,
    MetaVerification,
    ParseStatus,
    ProofTrajectory,
    RecordError,
    Verdict,
    VerificationOutput,
)
from verifier.results import WandbConfig, log_eval, print_table, write_metrics, write_report
from verifier.runner import RunResult, judge


@dataclass
class VerifierBenchConfig:
    """``python -m eval.verifierbench`` (mirrored by ``configs/verifierbench.yaml``)."""

    data: str = "???"  # gold: our JSONL, ProcessBench .json or OPC .parquet
    out: str = "???"
    limit: int | None = None  # first N records (smoke runs)
    engine: str = "endpoint"  # endpoint: the served `verifier`; offline: vllm.LLM on `offline.model` (a checkpoint)
    verifier: EndpointConfig = field(default_factory=EndpointConfig)
    offline: OfflineConfig = field(default_factory=OfflineConfig)  # engine=offline: model dir + vllm.LLM options
    judge: JudgeConfig = field(default_factory=lambda: JudgeConfig(with_reference=False, max_tokens=4096))
    meta: MetaVerifierConfig = field(default_factory=MetaVerifierConfig)
    meta_threshold: str = "BASIC_MATCH"
    bootstrap: BootstrapSpec = field(default_factory=BootstrapSpec)  # CI: replicates, seed, level
    RENAMED: ClassVar[dict[str, str]] = BOOTSTRAP_RENAMED  # old keys keep working (verifier.config.renamed)
    breakdowns: list[str] = field(default_factory=lambda: ["split", "subject"])
    cache: bool = True  # DIR/pass_cache.sqlite
    grade_every_pass: bool = False  # also meta-grade every pass: per_pass metrics, mean_reward (training's held-out)
    progress: bool = True
    title: str | None = None
    browser_index: str | None = None
    wandb: WandbConfig = field(default_factory=WandbConfig)
    verifier_run_dir: str | None = None  # a training run: judge keys not on the command line from its verifier card

    def resolve(self, given: frozenset[str]) -> VerifierBenchConfig:
        """The verifier card of ``verifier_run_dir`` fills the judge keys not given (``verifier.card.inherit``;
        ``engine=offline``: also ``offline.model``, the run's final weights)."""
        return inherit(self, given, endpoint="verifier", offline="offline")


def verifier_engine(cfg: VerifierBenchConfig):
    """The verifier engine: the served endpoint, or ``vllm.LLM`` in this process on ``offline.model``."""
    if cfg.engine == "endpoint":
        return OpenAIEngine(cfg.verifier)
    if cfg.engine == "offline":
        return VLLMOfflineEngine(cfg.offline)
    raise InputError(f"engine must be endpoint or offline, got {cfg.engine!r}")


def verifier_name(cfg: VerifierBenchConfig) -> str:
    """The judged model as reports name it (the endpoint's model, or the offline checkpoint)."""
    if cfg.engine == "offline":
        return cfg.offline.served_model_name or str(cfg.offline.model)
    return str(cfg.verifier.model)


def check_config(cfg: VerifierBenchConfig) -> None:
    """Errors before any work: an unknown engine, an offline checkpoint that is not a model directory."""
    if cfg.engine not in ("endpoint", "offline"):
        raise InputError(f"engine must be endpoint or offline, got {cfg.engine!r}")
    if cfg.engine == "offline" and not (Path(cfg.offline.model) / "config.json").exists():
        raise FileNotFoundError(f"offline.model={cfg.offline.model!r}: not a model directory (no config.json); "
                                "pass a saved checkpoint, e.g. a training run's DIR/final")


def representative_pass(passes: Sequence[VerificationOutput], verdict: Verdict, first_error_step: int) -> int:
    """Index of the pass whose verification carries the aggregated decision (graded by the meta-verifier).

    >>> from verifier.parser import parse_verification as p, format_verification as f
    >>> ps = [p(f("valid", -1, "")), p(f("invalid", 3, "")), p(f("invalid", 1, ""))]
    >>> representative_pass(ps, Verdict.INVALID, 1), representative_pass(ps[:1], Verdict.VALID, -1)
    (2, 0)
    >>> representative_pass([p("garbage")], Verdict.INVALID, -1)
    0
    """
    for i, q in enumerate(passes):
        if q.ok and q.verdict is verdict and (verdict is Verdict.VALID or first_error_step == NO_STEP
                                              or q.first_error_step == first_error_step):
            return i
    for i, q in enumerate(passes):  # e.g. majority: rejected by unparseable passes
        if q.ok and q.verdict is verdict:
            return i
    return 0


def meta_fields(m: MetaVerification, index: int) -> dict[str, Any]:
    return {"meta_grade": None if m.grade is None else m.grade.value, "meta_pass": index,
            "meta_status": m.status.value, "meta_rationale": m.rationale, "meta_detail": m.detail}


def meta_post(meta: Any):
    """The runner's post-step: grade the representative pass of a judgment (null grade = failed, counted)."""

    async def post(t: ProofTrajectory, row: dict[str, Any]) -> dict[str, Any]:
        j = Judgment.from_row(row)  # the record the runner just wrote (or, on resume, stored): passes as written
        i = representative_pass(j.passes, j.verdict, j.first_error_step)
        out = j.passes[i] if j.passes else VerificationOutput(ParseStatus.REQUEST_FAILED)
        [g] = await meta.agrade_batch([(t, out)])
        return meta_fields(g, i)

    return post


def graded(row: dict[str, Any]) -> bool:
    """A row whose meta grade exists; a null grade (failed call, unparseable) is re-graded on resume."""
    return row.get("meta_grade") is not None


def judge_and_grade(records: Sequence[ProofTrajectory], cfg: VerifierBenchConfig, out: Path,
                    engine: Engine | None = None) -> tuple[dict[str, Any], RunResult]:
    """Steps 1-3 on the one runner: ``out/judgments.jsonl`` (one row per finished trajectory); returns the
    counts and the runner's results (every record's judgment, in memory: scoring does not read the file back).

    A resumed run skips finished rows and re-grades the rows whose meta grade is null (their passes
    are kept, nothing is generated again); ``meta_failed`` counts the grades still null after this run.
    """
    own = engine is None  # built here: closed here (the offline engine holds a vLLM process and memory)
    engine = verifier_engine(cfg) if own else engine
    cache = PassCache(out / "pass_cache.sqlite") if cfg.cache else None
    try:
        res = judge(records, engine, cfg.judge, out / "judgments.jsonl",
                    columns=lambda t: {"problem_id": t.problem_id}, post=meta_post(make_meta_verifier(cfg.meta)),
                    post_ok=graded, cache=cache, progress=cfg.progress, desc="verifierbench")
    finally:
        if cache is not None:
            cache.close()
        if own and hasattr(engine, "close"):
            engine.close()
    s = res.summary
    failed = sum(not graded(r) for r in res.rows.values())
    return {"already_done": s["already_done"], "judged": s["judged"], "incomplete": s["failed"],
            "meta_regraded": s["post_redone"], "meta_failed": failed, "status": s["status"],
            "pass_status": s["pass_status"], "generated_passes": s["generated_passes"],
            "cached_passes": s["cached_passes"]}, res


def grade_passes(records: Sequence[ProofTrajectory], judged: dict[str, Judgment], cfg: VerifierBenchConfig,
                 opts: ScoreOptions) -> dict[str, Any]:
    """Meta-grade every pass (the GRPO meta reward of section 4.3 on held-out data; unparseable = 0).

    Returns ``per_pass`` (each pass scored as its own verdict: single-pass TPR / TNR / Balanced F1),
    ``mean_reward`` (over passes), ``per_record_reward`` (mean over each record's passes, in
    record order), ``per_record_problem`` (each of those records' ``problem_id``: the clusters of a paired
    bootstrap of two runs' rewards, ``eval.stats.mean_delta_ci``) and ``parse_failure_rate``.
    """
    scored = [t for t in records if t.id in judged]
    judgments = [judged[t.id] for t in scored]
    todo = [(t, p) for t, j in zip(scored, judgments) for p in j.passes if p.ok]
    grades = iter(make_meta_verifier(cfg.meta).grade_batch(todo))
    pp_gold, pp_preds, per_record, rewards, unparsed = [], {}, [], [], 0
    for t, j in zip(scored, judgments):
        rec = []
        for i, p in enumerate(j.passes):
            g = next(grades).grade if p.ok else None
            unparsed += not p.ok
            rec.append(0.0 if g is None else g.reward)
            key = f"{t.id}#{i}"
            pp_gold.append(dataclasses.replace(t, id=key))
            pp_preds[key] = Prediction(key, p.verdict if p.ok else None, p.first_error_step,
                                       g if p.ok else MetaGrade.WRONG_POLARITY, has_meta=True)
        rewards += rec
        per_record.append(sum(rec) / len(rec) if rec else 0.0)
    per_pass = score_predictions(pp_gold, pp_preds, dataclasses.replace(opts, breakdowns=(), k_curve=False))
    return {"per_pass": flatten(per_pass), "mean_reward": sum(rewards) / max(1, len(rewards)),
            "per_record_reward": per_record, "per_record_problem": [t.problem_id for t in scored],
            "parse_failure_rate": unparsed / max(1, len(rewards))}


@holds_output()
def run(cfg: VerifierBenchConfig) -> dict[str, Any]:
    """Judge, meta-verify, score and report (on the runner's results in memory); returns the metrics document."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    records = load_any(cfg.data).records
    if cfg.limit is not None:
        records = records[: cfg.limit]
    missing = [r.id for r in records if r.annotation is None]
    if missing:
        raise RecordError(missing[0], "annotation", f"VerifierBench needs expert annotations "
                                                     f"({len(missing)} record(s) without one)")
    check_config(cfg)
    (out / "config.json").write_text(json.dumps(asdict(_redacted(cfg)), indent=2, default=str) + "\n")
    counts, res = judge_and_grade(records, cfg, out)
    judged = res.judged()  # this run's records only (rows of other ids in the file are not scored)
    preds = {i: Prediction.from_judgment(j) for i, j in judged.items()}
    al = align_ids([r.id for r in records], list(preds), allow_missing=True)
    opts: ScoreOptions = options(_score_cfg(cfg))
    doc = flatten(score_predictions(records, preds, opts), al)
    if cfg.grade_every_pass:
        doc.update(grade_passes(records, judged, cfg, opts))
    doc["run"] = {**counts, "policy": cfg.judge.policy, "n_passes": cfg.judge.n, "meta": cfg.meta.kind,
                  "engine": cfg.engine, "verifier": verifier_name(cfg)}
    doc["inputs"] = {"data": str(cfg.data), "judgments": str(out / "judgments.jsonl")}
    doc["config"] = asdict(_redacted(cfg))
    path = write_metrics(out, doc)
    title = cfg.title or f"VerifierBench: {verifier_name(cfg)} ({cfg.judge.policy}, n={cfg.judge.n})"
    print_table(doc, title)
    browser_index = cfg.browser_index
    if browser_index is None:  # the report links the judgment browser of this run (eval.browse)
        browser_index = write_browser(res.ordered_rows(records), records, out / "browser",
                                      title=title, on_error="skip", sources={"judgments": str(out / "judgments.jsonl")})
    report = write_report(out, doc, title=title, browser_index=browser_index)
    if counts["incomplete"]:
        print(f"warning: {counts['incomplete']} trajectories had failed requests and were not scored; "
              "re-run the same command to finish them")
    if counts["meta_failed"]:
        print(f"warning: {counts['meta_failed']} meta grades failed (null, scored as not matching); "
              "re-run the same command to re-grade them")
    if cfg.wandb.enabled:
        log_eval(out, doc, cfg=asdict(_redacted(cfg)), wandb_cfg=cfg.wandb, gold=records, preds=preds)
    print(f"wrote {path} and {report}")
    return doc


def _score_cfg(cfg: VerifierBenchConfig) -> ScoreConfig:
    return ScoreConfig(gold=cfg.data, predictions="", out=cfg.out, meta_threshold=cfg.meta_threshold,
                       bootstrap=cfg.bootstrap,
                       breakdowns=list(cfg.breakdowns))


def _redacted(cfg: VerifierBenchConfig) -> VerifierBenchConfig:
    """The config without API keys (for config.json, metrics.json and W&B)."""
    v = dataclasses.replace(cfg.verifier, api_key="***" if cfg.verifier.api_key else None)
    me = dataclasses.replace(cfg.meta.endpoint, api_key="***" if cfg.meta.endpoint.api_key else None)
    return dataclasses.replace(cfg, verifier=v, meta=dataclasses.replace(cfg.meta, endpoint=me))


def main() -> None:
    hydra_main("verifierbench", VerifierBenchConfig)(run)()


if __name__ == "__main__":
    main()
