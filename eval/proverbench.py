"""ProverBench run: a generator writes proofs, the verifier judges them pessimistically (sections 4.4, 5.2, Table 1).

``python -m eval.proverbench problems=PATH out=DIR generator.base_url=URL generator.model=NAME
verifier.base_url=URL verifier.model=NAME [judge.n=8] [proofs_per_problem=1]``

1. Generation: the B.1 prompt (``verifier.templates.generation_prompt``) for each problem;
   the completion is split into steps (``split_proof_steps``) and appended to
   ``DIR/proofs.jsonl`` as a trajectory (``generator`` = the model; generation status in ``meta``).
   A truncated or empty proof is kept (it will be judged, and rejected); a failed request is
   not persisted and is retried by the next run.
2. Judging: ``judge.n`` passes (8) under ``judge.policy`` (pessimistic: accepted only if every
   pass accepts), the reference solution in the prompt when the set has one
   (``judge.with_reference``). Rows go to ``DIR/judgments.jsonl``.
3. Score: acceptance overall, per split (UG / QE; IMO-ProofBench: its Level) and per subject,
   with 95% CIs clustered by problem; the k-curve; judge noise. ``DIR/metrics.json``,
   ``DIR/report.md``, ``acceptance.png``, ``k_curve.png``, W&B.

Both files are written as work completes; a killed run resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from data_pipeline.importers import ProofProblem, load_proofbench_problems
from verifier.budget import check_budget
from verifier.engine import EndpointConfig, Engine, GenerationRequest, OpenAIEngine, SamplingConfig, base_seed
from verifier.io import JsonlAppender, load_trajectories
from verifier.judging import JudgeConfig
from verifier.outputs import holds_output
from verifier.records import ProofTrajectory
from verifier.runner import done_ids
from verifier.results import WandbConfig, log_eval, pct, write_metrics, write_report
from verifier.templates import as_messages, generation_prompt, split_proof_steps


@dataclass
class GenerationOptions:
    """Sampling of the proof generator (section 5.1: temperature 1.0)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 16384
    run_seed: int = 0


@dataclass
class ProverBenchConfig:
    """``python -m eval.proverbench`` (mirrored by ``configs/proverbench.yaml``)."""

    problems: str = "???"  # IMO-ProofBench v2 CSV or a JSONL of problems
    out: str = "???"
    limit: int | None = None  # first N problems
    proofs_per_problem: int = 1
    chunk_size: int = 32  # proofs generated + persisted together
    generator: EndpointConfig = field(default_factory=EndpointConfig)
    generation: GenerationOptions = field(default_factory=GenerationOptions)
    verifier: EndpointConfig = field(default_factory=EndpointConfig)
    judge: JudgeConfig = field(default_factory=lambda: JudgeConfig(with_reference=True, max_tokens=4096))
    bootstrap_n: int = 1000
    bootstrap_seed: int = 0
    ci_level: float = 0.95
    breakdowns: list[str] = field(default_factory=lambda: ["split", "subject"])
    cache: bool = True
    progress: bool = True
    title: str | None = None
    browser_index: str | None = None
    wandb: WandbConfig = field(default_factory=lambda: WandbConfig(tags=["proverbench"]))


def proof_id(problem_id: str, j: int) -> str:
    """Trajectory id of the j-th generated proof of a problem.

    >>> proof_id("PB-Basic-001", 0)
    'PB-Basic-001/g0'
    """
    return f"{problem_id}/g{j}"


def to_trajectory(problem: ProofProblem, j: int, text: str, model: str, status: str,
                  finish_reason: str | None) -> ProofTrajectory:
    """A generated proof as a trajectory (steps split on ``Step k:`` markers, else paragraphs)."""
    steps = split_proof_steps(text) if text.strip() else [""]
    return ProofTrajectory(
        id=proof_id(problem.id, j), problem_id=problem.id, problem=problem.problem, proof_steps=tuple(steps),
        reference_solution=problem.reference_solution, subject=problem.subject, split=problem.split,
        source=problem.source, generator=model,
        meta={"generation_status": status, "finish_reason": finish_reason, "proof_index": j},
    )


def generate(problems: Sequence[ProofProblem], cfg: ProverBenchConfig, out: Path) -> dict[str, int]:
    """Step 1: append missing proofs to ``out/proofs.jsonl``; returns counts."""
    path = out / "proofs.jsonl"
    done = done_ids(path)
    todo = [(p, j) for p in problems for j in range(cfg.proofs_per_problem) if proof_id(p.id, j) not in done]
    counts = {"proofs_already_done": len(problems) * cfg.proofs_per_problem - len(todo), "generated": 0,
              "generation_failed": 0, "generation_truncated": 0}
    if not todo:
        return counts
    engine = OpenAIEngine(cfg.generator)
    g = cfg.generation
    sampling = SamplingConfig(temperature=g.temperature, top_p=g.top_p, max_tokens=g.max_tokens)
    check_budget(engine, g.max_tokens, [GenerationRequest(as_messages(generation_prompt(p.problem)), key=proof_id(p.id, j))
                                        for p, j in todo], what="generation.max_tokens")
    bar = None
    if cfg.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc="generate proofs", unit="proof")
    try:
        with JsonlAppender(path) as app:
            for start in range(0, len(todo), max(1, cfg.chunk_size)):
                chunk = todo[start:start + cfg.chunk_size]
                reqs = [GenerationRequest(as_messages(generation_prompt(p.problem)), n=1,
                                          seed=base_seed(proof_id(p.id, j), g.run_seed), key=proof_id(p.id, j))
                        for p, j in chunk]
                for (p, j), [c] in zip(chunk, engine.generate(reqs, sampling)):
                    if c.status == "request_failed":
                        counts["generation_failed"] += 1
                        continue
                    status = c.status if c.status != "ok" else ("truncated" if c.finish_reason == "length" else "ok")
                    counts["generation_truncated"] += status == "truncated"
                    app.write(to_trajectory(p, j, c.text, engine.model, status, c.finish_reason).to_dict())
                    counts["generated"] += 1
                if bar is not None:
                    bar.update(len(chunk))
    finally:
        if bar is not None:
            bar.close()
    return counts


def verifier_engine(cfg: ProverBenchConfig) -> Engine:
    """The verifier's engine (the one place it is built)."""
    return OpenAIEngine(cfg.verifier)


def judge(trajs: Sequence[ProofTrajectory], cfg: ProverBenchConfig, out: Path) -> dict[str, int]:
    """Step 2 on the one runner (``verifier.runner.judge``): ``out/judgments.jsonl``; returns counts."""
    from verifier.judging import PassCache
    from verifier.runner import judge as run_judge

    def columns(t: ProofTrajectory) -> dict[str, Any]:
        return {"problem_id": t.problem_id, "split": t.split, "subject": t.subject,
                "with_reference": bool(cfg.judge.with_reference and t.reference_solution)}

    cache = PassCache(out / "pass_cache.sqlite") if cfg.cache else None
    try:
        res = run_judge(trajs, verifier_engine(cfg), cfg.judge, out / "judgments.jsonl", columns=columns, cache=cache,
                        progress=cfg.progress)
    finally:
        if cache is not None:
            cache.close()
    s = res.summary
    return {"judgments_already_done": s["already_done"], "judged": s["judged"], "judge_incomplete": s["failed"],
            "judge_pass_status": s["pass_status"]}


def score(trajs: Sequence[ProofTrajectory], rows: dict[str, dict[str, Any]], cfg: ProverBenchConfig
          ) -> dict[str, Any]:
    """Step 3: the metrics document (acceptance by split / subject, k-curve, flip rate)."""
    from eval.metrics import Prediction, acceptance_table, flip_rate, k_curve
    from eval.stats import BootstrapSpec

    spec = BootstrapSpec(n=cfg.bootstrap_n, seed=cfg.bootstrap_seed, level=cfg.ci_level)
    scored = [t for t in trajs if t.id in rows]
    preds = [Prediction.from_dict(rows[t.id]) for t in scored]
    from verifier.records import Verdict

    accepted = [p.verdict is Verdict.VALID for p in preds]
    table = acceptance_table(scored, accepted, spec, tuple(cfg.breakdowns))
    statuses: dict[str, int] = {}
    for t in scored:
        s = str(t.meta.get("generation_status", "ok"))
        statuses[s] = statuses.get(s, 0) + 1
    judge_status: dict[str, int] = {}
    for t in scored:
        s = rows[t.id].get("status", "ok")
        judge_status[s] = judge_status.get(s, 0) + 1
    doc: dict[str, Any] = {
        "proverbench.acceptance": table["overall"],
        "acceptance": table,
        "n": len(scored),
        "passes": cfg.judge.n,
        "policy": cfg.judge.policy,
        "counts": {
            "problems": len({t.problem_id for t in scored}),
            "proofs": len(scored),
            "accepted": sum(accepted),
            "not_scored": len(trajs) - len(scored),
            "with_reference": sum(1 for t in scored if rows[t.id].get("with_reference")),
            "generation_status": statuses,
            "judge_status": judge_status,
            "unparseable_passes": sum(int(rows[t.id].get("n_unparseable", 0)) for t in scored),
        },
        "bootstrap": spec.to_dict(),
    }
    for fld in cfg.breakdowns:
        for key, m in (table.get(fld) or {}).items():
            doc[f"proverbench.acceptance.{fld}.{key}"] = m
    passes = [p.passes for p in preds]
    if any(passes):
        doc["k_curve"] = k_curve([None] * len(scored), passes, spec)
        doc["flip"] = flip_rate(passes, [t.problem_id for t in scored], spec)
    return doc


def print_table(doc: dict[str, Any], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{title} (accepted only if all {doc['passes']} passes accept; 95% CI over problems)")
    t.add_column("split")
    t.add_column("accepted % [95% CI]", justify="right")
    t.add_column("accepted / n", justify="right")
    acc = doc["acceptance"]
    for key, m in [("overall", acc["overall"])] + list((acc.get("split") or {}).items()):
        t.add_row(key, pct(m), f"{m['counts']['accepted']}/{m['counts']['n']}")
    Console(width=110).print(t)


@holds_output()
def run(cfg: ProverBenchConfig) -> dict[str, Any]:
    """Generate, judge, score and report; returns the metrics document."""
    from verifier.io import read_jsonl

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    problems = load_proofbench_problems(cfg.problems)
    if cfg.limit is not None:
        problems = problems[: cfg.limit]
    (out / "config.json").write_text(json.dumps(asdict(_redacted(cfg)), indent=2, default=str) + "\n")
    counts = generate(problems, cfg, out)
    wanted = {proof_id(p.id, j) for p in problems for j in range(cfg.proofs_per_problem)}
    trajs = [t for t in load_trajectories(out / "proofs.jsonl").records if t.id in wanted]
    counts.update(judge(trajs, cfg, out))
    rows = {str(r["id"]): r for r in read_jsonl(out / "judgments.jsonl")}
    doc = score(trajs, rows, cfg)
    doc["run"] = {**counts, "generator": cfg.generator.model, "verifier": cfg.verifier.model,
                  "proofs_per_problem": cfg.proofs_per_problem}
    doc["inputs"] = {"problems": str(cfg.problems), "proofs": str(out / "proofs.jsonl"),
                     "judgments": str(out / "judgments.jsonl")}
    doc["config"] = asdict(_redacted(cfg))
    path = write_metrics(out, doc)
    title = cfg.title or f"ProverBench: {cfg.generator.model} judged by {cfg.verifier.model}"
    print_table(doc, title)
    browser_index = cfg.browser_index
    if browser_index is None:  # the report links the judgment browser of this run (eval.browse)
        from eval.browse import write_browser_for_run

        browser_index = write_browser_for_run(out / "judgments.jsonl", trajs, out / "browser", title=title)
    report = write_report(out, doc, title=title, browser_index=browser_index)
    missing = counts.get("generation_failed", 0) + counts.get("judge_incomplete", 0)
    if missing:
        print(f"warning: {missing} proofs had failed requests and were not scored; re-run the same command "
              "to finish them")
    if cfg.wandb.enabled:
        table_rows = [{"id": t.id, "problem_id": t.problem_id, "split": t.split, "subject": t.subject,
                       "generation_status": t.meta.get("generation_status"),
                       "verdict": rows[t.id]["verdict"], "n_accept": rows[t.id].get("n_accept"),
                       "n_passes": rows[t.id].get("n_passes"), "proof": "\n\n".join(t.proof_steps)[:2000]}
                      for t in trajs if t.id in rows]
        log_eval(out, doc, cfg=asdict(_redacted(cfg)), wandb_cfg=cfg.wandb, rows=table_rows,
                 job_type="proverbench")
    print(f"wrote {path} and {report}")
    return doc


def _redacted(cfg: ProverBenchConfig) -> ProverBenchConfig:
    g = dataclasses.replace(cfg.generator, api_key="***" if cfg.generator.api_key else None)
    v = dataclasses.replace(cfg.verifier, api_key="***" if cfg.verifier.api_key else None)
    return dataclasses.replace(cfg, generator=g, verifier=v)


def main() -> None:
    from verifier.config import hydra_main

    hydra_main("proverbench", ProverBenchConfig)(run)()


if __name__ == "__main__":
    main()
