"""ProverBench run: a generator writes proofs, the verifier judges them pessimistically (sections 4.4, 5.2, Table 1).

``python -m eval.proverbench problems=PATH out=DIR generator.base_url=URL generator.model=NAME
verifier.base_url=URL verifier.model=NAME [judge.n=8] [proofs_per_problem=1] [refine.rounds=R]
[pool.verifiers='[{base_url: URL2, model: NAME2}]' pool.rule=all|majority]``

1. Generation on THE generation runner (``verifier.generation``): the B.1 prompt for each
   (problem, sample); the completion, its reasoning removed (``generation.reasoning_format``: ``think``
   (default) | ``think_opened`` | ``none``), is split into steps and appended to ``DIR/proofs.jsonl`` as
   a trajectory (``generator`` = the model; generation status in ``meta``). A truncated or empty
   proof is kept (it will be judged, and rejected); a proof whose thinking never ended is kept as
   ``unfinished_thinking``: never judged, not accepted, counted; a failed request is not persisted and
   is retried by the next run.
2. Judging: ``judge.n`` passes (8) under ``judge.policy`` (pessimistic: accepted only if every
   pass accepts), the reference solution in the prompt when the set has one
   (``judge.with_reference``). Rows go to ``DIR/judgments.jsonl``.
   A judge pool (``pool.verifiers``, ``verifier.pool``): every member judges into its own file
   (``judgments.jsonl`` for ``verifier``, ``judgments.pool<k>.jsonl``); a proof is accepted only when
   ``all`` members (or a strict ``majority``) accept; the report shows each model's acceptance too.
3. Refine (``refine.rounds=R``, DeepSeekMath-V2's generate -> verify -> refine): a proof the verifier
   rejects goes back to the generator with the rationale of a rejecting pass (``revise_proof.j2``);
   the revision (id ``P-g0-s0-r1``, ...: ``verifier.identity.version_id``) is judged the same way, up to R
   rounds. Acceptance after each round by split and subject (``metrics.json`` ``refine``), ``refine.png``; each version keeps its
   history (earlier versions, rationales, verdicts), shown in the judgment browser.
4. Score: acceptance overall, per split (UG / QE; IMO-ProofBench: its Level) and per subject,
   with 95% CIs clustered by problem; the k-curve; judge noise. ``DIR/metrics.json``,
   ``DIR/report.md``, ``acceptance.png``, ``k_curve.png``, W&B.

Every file is written as work completes; a killed run resumes where it stopped: each
(problem, sample, round) is generated and judged exactly once.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rich.console import Console
from rich.table import Table

from eval.browse import write_browser_for_run
from eval.metrics import Prediction, acceptance_table, flip_rate, k_curve
from eval.stats import BOOTSTRAP_RENAMED, BootstrapSpec
from verifier.card import inherit
from verifier.config import EndpointConfig, hydra_main
from verifier.engine import Engine, OpenAIEngine
from verifier.formats import ProofProblem, load_proofbench_problems
from verifier.generation import (
    GenerationConfig,
    GenTask,
    history_entry,
    refine_condition,
    tasks_for,
    unfinished_thinking,
)
from verifier.generation import generate as run_generation
from verifier.identity import version_id
from verifier.io import load_trajectories
from verifier.judging import JudgeConfig, PassCache
from verifier.judgment import Judgment
from verifier.outputs import holds_output
from verifier.parser import REASONING_FORMATS
from verifier.pool import PoolConfig, member_labels, pool_accepts
from verifier.records import ProofTrajectory, Verdict
from verifier.results import (
    WandbConfig,
    ci_text,
    figure,
    log_eval,
    md_table,
    pct,
    save_figure,
    write_metrics,
    write_report,
)
from verifier.runner import judge as run_judge

GenerationOptions = GenerationConfig  # the prover's sampling (section 5.1: temperature 1.0); former name


@dataclass
class RefineConfig:
    """The refine loop: a rejected proof is revised from a rejecting pass's rationale, up to R rounds."""

    rounds: int = 0  # R; 0: generate and judge once
    template: str = "revise_proof"  # verifier/prompts/<name>.j2: problem, proof_steps, verdict, first_error_step, critique
    critique_chars: int = 4000


@dataclass
class ProverBenchConfig:
    """``python -m eval.proverbench`` (mirrored by ``configs/proverbench.yaml``)."""

    problems: str = "???"  # IMO-ProofBench v2 CSV or a JSONL of problems
    out: str = "???"
    limit: int | None = None  # first N problems
    proofs_per_problem: int = 1
    chunk_size: int = 32  # proofs generated + persisted together
    generator: EndpointConfig = field(default_factory=EndpointConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    verifier: EndpointConfig = field(default_factory=EndpointConfig)
    pool: PoolConfig = field(default_factory=PoolConfig)  # more verifiers beside ``verifier`` (a judge pool)
    refine: RefineConfig = field(default_factory=RefineConfig)
    judge: JudgeConfig = field(default_factory=lambda: JudgeConfig(with_reference=True, max_tokens=4096))
    bootstrap: BootstrapSpec = field(default_factory=BootstrapSpec)  # CI: replicates, seed, level
    RENAMED: ClassVar[dict[str, str]] = BOOTSTRAP_RENAMED  # old keys keep working (verifier.config.renamed)
    breakdowns: list[str] = field(default_factory=lambda: ["split", "subject"])
    cache: bool = True
    progress: bool = True
    title: str | None = None
    browser_index: str | None = None
    wandb: WandbConfig = field(default_factory=lambda: WandbConfig(tags=["proverbench"]))
    verifier_run_dir: str | None = None  # a training run: judge keys not on the command line from its verifier card

    def resolve(self, given: frozenset[str]) -> ProverBenchConfig:
        """The verifier card of ``verifier_run_dir`` fills the judge keys not given (``verifier.card.inherit``;
        the card is ``verifier``'s: ``pool.verifiers`` judge with the same ``judge`` keys)."""
        return inherit(self, given, endpoint="verifier")

    def validate(self) -> None:
        """Stop before any work on a value that makes the run meaningless (names the field)."""
        if self.proofs_per_problem < 1:
            raise ValueError(f"proverbench config, field 'proofs_per_problem': must be >= 1, got {self.proofs_per_problem}")
        if self.refine.rounds < 0:
            raise ValueError(f"proverbench config, field 'refine.rounds': must be >= 0, got {self.refine.rounds}")
        if self.generation.reasoning_format not in REASONING_FORMATS:
            raise ValueError(f"proverbench config, field 'generation.reasoning_format': expected one of "
                             f"{', '.join(REASONING_FORMATS)}, got {self.generation.reasoning_format!r}")
        self.pool.validate()


def proof_id(problem_id: str, j: int) -> str:
    """Trajectory id of the j-th generated proof of a problem (round 0; ``verifier.identity.version_id``).

    >>> proof_id("PB-Basic-001", 0)
    'PB-Basic-001-g0-s0-r0'
    """
    return version_id(problem_id, j)


def generation_config(cfg: ProverBenchConfig) -> GenerationConfig:
    """The generation runner's config: ``generation`` plus the chunking and the refine template."""
    return dataclasses.replace(cfg.generation, chunk_size=cfg.chunk_size, refine_template=cfg.refine.template,
                               critique_chars=cfg.refine.critique_chars)


def generate(tasks: Sequence[GenTask], cfg: ProverBenchConfig, out: Path,
             histories: dict[str, list[dict[str, Any]]] | None = None, desc: str = "generate proofs",
             engine: Engine | None = None) -> dict[str, int]:
    """Append the missing proofs of ``tasks`` to ``out/proofs.jsonl`` (the one generation runner); counts.
    ``engine``: the generator (default: ``cfg.generator``'s endpoint; e.g. ``vllm.LLM`` on a saved prover)."""
    s = run_generation(tasks, engine or OpenAIEngine(cfg.generator), generation_config(cfg), out / "proofs.jsonl",
                       histories=histories, progress=cfg.progress, desc=desc)
    return {"proofs_already_done": s["already_done"], "generated": s["generated"], "generation_failed": s["failed"],
            "generation_truncated": s["truncated"], "generation_unfinished_thinking": s["unfinished_thinking"]}


def members(cfg: ProverBenchConfig) -> list[EndpointConfig]:
    """The judge pool: ``verifier`` first, then ``pool.verifiers``."""
    return [cfg.verifier, *cfg.pool.verifiers]


def judgments_path(out: Path, k: int) -> Path:
    """Member k's judgments: ``judgments.jsonl`` for the main verifier, ``judgments.pool<k>.jsonl`` for the others."""
    return out / ("judgments.jsonl" if k == 0 else f"judgments.pool{k}.jsonl")


def verifier_engine(cfg: ProverBenchConfig, k: int = 0) -> Engine:
    """Member k's engine (the one place it is built)."""
    return OpenAIEngine(members(cfg)[k])


def judge(trajs: Sequence[ProofTrajectory], cfg: ProverBenchConfig, out: Path, k: int = 0
          ) -> tuple[dict[str, int], dict[str, Judgment]]:
    """Step 2 for pool member k on the one runner (``verifier.runner.judge``); (counts, judgment records by id)."""

    def columns(t: ProofTrajectory) -> dict[str, Any]:
        return {"problem_id": t.problem_id, "split": t.split, "subject": t.subject,
                "round": int(t.meta.get("round", 0)),
                "with_reference": bool(cfg.judge.with_reference and t.reference_solution)}

    cache = PassCache(out / ("pass_cache.sqlite" if k == 0 else f"pass_cache.pool{k}.sqlite")) if cfg.cache else None
    label = member_labels(members(cfg))[k]
    try:
        res = run_judge(trajs, verifier_engine(cfg, k), cfg.judge, judgments_path(out, k), columns=columns,
                        cache=cache, progress=cfg.progress,
                        desc=f"judge n={cfg.judge.n} {cfg.judge.policy}" + (f" [{label}]" if cfg.pool.verifiers else ""))
    finally:
        if cache is not None:
            cache.close()
    s = res.summary
    return ({"judgments_already_done": s["already_done"], "judged": s["judged"], "judge_incomplete": s["failed"],
             "judge_pass_status": s["pass_status"]}, res.judged())


def decide(t: ProofTrajectory, member_judgments: Sequence[Mapping[str, Judgment]], rule: str) -> bool | None:
    """The pool's decision on one version (None while a member has not judged it); a proof whose thinking
    never ended is never judged and not accepted (False)."""
    if unfinished_thinking(t):
        return False
    js = [m.get(t.id) for m in member_judgments]
    if any(j is None for j in js):
        return None
    return pool_accepts([j.verdict is Verdict.VALID for j in js], rule)  # type: ignore[union-attr]


def rejecting_judgment(tid: str, member_judgments: Sequence[Mapping[str, Judgment]]) -> Judgment | None:
    """The judgment whose rationale goes back to the prover: the first member that rejects."""
    for m in member_judgments:
        j = m.get(tid)
        if j is not None and j.verdict is not Verdict.VALID:
            return j
    return None


def score(trajs: Sequence[ProofTrajectory], rows: Mapping[str, Judgment], cfg: ProverBenchConfig,
          decisions: dict[str, bool | None] | None = None) -> dict[str, Any]:
    """Step 4: the metrics document (acceptance by split / subject, k-curve, flip rate) of the main verifier's
    judgment records ``rows`` (by id). ``decisions``: the
    pool's (default: the main verifier's verdicts); a proof whose thinking never ended counts as not accepted
    (``counts.unfinished_thinking``); the k-curve and flip rate are the main verifier's passes (judged proofs)."""
    spec = cfg.bootstrap
    scored = [t for t in trajs if unfinished_thinking(t) or
              (t.id in rows and (decisions is None or decisions.get(t.id) is not None))]
    judged = [t for t in scored if not unfinished_thinking(t)]
    preds = {t.id: Prediction.from_judgment(rows[t.id]) for t in judged}

    accepted = [False if t.id not in preds else
                (preds[t.id].verdict is Verdict.VALID if decisions is None else bool(decisions[t.id])) for t in scored]
    table = acceptance_table(scored, accepted, spec, tuple(cfg.breakdowns))
    statuses: dict[str, int] = {}
    for t in scored:
        s = str(t.meta.get("generation_status", "ok"))
        statuses[s] = statuses.get(s, 0) + 1
    judge_status: dict[str, int] = {}
    for t in judged:
        s = rows[t.id].status
        judge_status[s] = judge_status.get(s, 0) + 1
    doc: dict[str, Any] = {
        "proverbench.acceptance": table["overall"],
        "acceptance": table,
        "n": len(scored),
        "passes": cfg.judge.n,
        "policy": cfg.judge.policy,
        "pool_rule": cfg.pool.rule if cfg.pool.verifiers else None,
        "counts": {
            "problems": len({t.problem_id for t in scored}),
            "proofs": len(scored),
            "accepted": sum(accepted),
            "not_scored": len(trajs) - len(scored),
            "unfinished_thinking": len(scored) - len(judged),  # never judged, not accepted
            "with_reference": sum(1 for t in judged if rows[t.id].columns.get("with_reference")),
            "generation_status": statuses,
            "judge_status": judge_status,
            "unparseable_passes": sum(rows[t.id].aggregate.n_unparseable for t in judged),
        },
        "bootstrap": spec.to_dict(),
    }
    for fld in cfg.breakdowns:
        for key, m in (table.get(fld) or {}).items():
            doc[f"proverbench.acceptance.{fld}.{key}"] = m
    passes = [preds[t.id].passes for t in judged]
    if any(passes):
        doc["k_curve"] = k_curve([None] * len(judged), passes, spec)
        doc["flip"] = flip_rate(passes, [t.problem_id for t in judged], spec)
    return doc


def print_table(doc: dict[str, Any], title: str) -> None:
    t = Table(title=f"{title} (accepted only if all {doc['passes']} passes accept; 95% CI over problems)")
    t.add_column("split")
    t.add_column("accepted % [95% CI]", justify="right")
    t.add_column("accepted / n", justify="right")
    acc = doc["acceptance"]
    for key, m in [("overall", acc["overall"])] + list((acc.get("split") or {}).items()):
        t.add_row(key, pct(m), f"{m['counts']['accepted']}/{m['counts']['n']}")
    Console(width=110).print(t)


def run_rounds(problems: Sequence[ProofProblem], cfg: ProverBenchConfig, out: Path,
               generator_engine: Engine | None = None) -> dict[str, Any]:
    """Generate and judge round 0, then refine the rejected versions for ``refine.rounds`` rounds.

    Returns ``counts``, ``trajs`` (every version, by id), ``rows`` (each member's judgment records by id),
    ``decisions`` (the
    pool's, by version id) and ``latest`` (per (problem, sample) the version ids of rounds 0..R, in order).
    Every step reads what is on disk first, so a killed run resumes at the (problem, sample, round) it reached.
    """

    counts: Counter = Counter()
    n_members = len(members(cfg))
    member_judgments: list[dict[str, Judgment]] = [{} for _ in range(n_members)]
    trajs: dict[str, ProofTrajectory] = {}
    by_key = {(p.id, j): p for p in problems for j in range(cfg.proofs_per_problem)}
    chain: dict[tuple[str, int], list[str]] = {key: [] for key in by_key}  # version ids, round by round
    tasks = tasks_for(problems, cfg.proofs_per_problem)
    histories: dict[str, list[dict[str, Any]]] = {}
    decisions: dict[str, bool | None] = {}
    per_round: list[dict[str, Any]] = []
    for r in range(cfg.refine.rounds + 1):
        if r > 0:  # the rejected latest versions go back to the prover with a rejecting pass's rationale
            tasks, histories = [], {}
            for (pid, j), ids in chain.items():
                if not ids or len(ids) < r or decisions.get(ids[-1]) is not False:
                    continue  # accepted, not judged yet (re-run to finish) or not generated
                prev = trajs[ids[-1]]
                cond = refine_condition(prev, rejecting_judgment(prev.id, member_judgments))
                if cond is None:
                    continue
                task = GenTask(by_key[(pid, j)], j, r, cond)
                tasks.append(task)
                histories[task.id] = [*prev.meta.get("history", []),
                                      history_entry(prev, rejecting_judgment(prev.id, member_judgments), cond)]
            if not tasks:
                per_round.append({"round": r, "revised": 0})
                continue
        g = generate(tasks, cfg, out, histories, desc=f"generate proofs (round {r})" if r else "generate proofs",
                     engine=generator_engine)
        wanted = {t.id for t in tasks}
        new = [t for t in load_trajectories(out / "proofs.jsonl").records if t.id in wanted]
        for t in new:
            trajs[t.id] = t
            chain[(t.problem_id, int(t.meta.get("proof_index", 0)))].append(t.id)
        rcounts: Counter = Counter(g)
        finished = [t for t in new if not unfinished_thinking(t)]  # an unfinished thinking is never judged
        for k in range(n_members):
            c, judged_k = judge(finished, cfg, out, k)
            member_judgments[k].update(judged_k)
            if k == 0:
                rcounts.update({key: v for key, v in c.items() if key != "judge_pass_status"})
                rcounts["judge_pass_status"] = c["judge_pass_status"]  # type: ignore[assignment]
            else:
                rcounts[f"pool{k}_judge_incomplete"] += c["judge_incomplete"]
        for t in new:
            decisions[t.id] = decide(t, member_judgments, cfg.pool.rule)
        per_round.append({"round": r, "revised": len(tasks) if r else 0, **dict(rcounts)})
        for key, v in rcounts.items():
            if key != "judge_pass_status":
                counts[key] += v
        if r == 0:
            counts["judge_pass_status"] = rcounts.get("judge_pass_status", {})  # type: ignore[assignment]
    return {"counts": dict(counts), "trajs": trajs, "rows": member_judgments, "decisions": decisions, "chain": chain,
            "per_round": per_round}


def accepted_by_round(chain: dict[tuple[str, int], list[str]], decisions: dict[str, bool | None], r: int
                      ) -> dict[tuple[str, int], bool | None]:
    """Per (problem, sample): accepted after round r (its version of round <= r is accepted), None if unjudged.

    >>> ch = {("p", 0): ["p-g0-s0-r0", "p-g0-s0-r1"], ("q", 0): ["q-g0-s0-r0"]}
    >>> d = {"p-g0-s0-r0": False, "p-g0-s0-r1": True, "q-g0-s0-r0": True}
    >>> accepted_by_round(ch, d, 0), accepted_by_round(ch, d, 1)
    ({('p', 0): False, ('q', 0): True}, {('p', 0): True, ('q', 0): True})
    """
    out: dict[tuple[str, int], bool | None] = {}
    for key, ids in chain.items():
        ids = ids[: r + 1]
        out[key] = None if not ids else decisions.get(ids[-1])
    return out


def refine_doc(res: dict[str, Any], cfg: ProverBenchConfig) -> dict[str, Any]:
    """Acceptance after each round (overall, by split and subject, 95% CIs over problems) and the gain."""
    spec = cfg.bootstrap
    firsts = {key: res["trajs"][ids[0]] for key, ids in res["chain"].items() if ids}
    by_round = []
    for r in range(cfg.refine.rounds + 1):
        acc = accepted_by_round(res["chain"], res["decisions"], r)
        keys = [k for k in firsts if acc.get(k) is not None]
        table = acceptance_table([firsts[k] for k in keys], [bool(acc[k]) for k in keys], spec,
                                 tuple(cfg.breakdowns))
        by_round.append({"round": r, "acceptance": table,
                         "versions": sum(1 for ids in res["chain"].values() if len(ids) > r)})
    v0, vr = by_round[0]["acceptance"]["overall"]["value"], by_round[-1]["acceptance"]["overall"]["value"]
    return {"rounds": cfg.refine.rounds, "by_round": by_round,
            "gain": None if v0 is None or vr is None else vr - v0, "per_round_counts": res["per_round"]}


def plot_refine(doc: dict[str, Any], path: Path) -> Path:
    """Acceptance (%) against refine rounds: overall and per split, with the overall 95% CI."""

    fig, ax = figure()
    rounds = [b["round"] for b in doc["by_round"]]
    overall = [b["acceptance"]["overall"] for b in doc["by_round"]]
    ys = [100 * (m["value"] or 0.0) for m in overall]
    ax.plot(rounds, ys, "o-", color="C0", label="overall")
    cis = [m.get("ci") for m in overall]
    if all(cis):
        ax.fill_between(rounds, [100 * c[0] for c in cis], [100 * c[1] for c in cis], color="C0", alpha=0.15)
    splits = sorted({s for b in doc["by_round"] for s in (b["acceptance"].get("split") or {})})
    for i, sp in enumerate(splits):
        vals = [(b["acceptance"].get("split") or {}).get(sp, {}).get("value") for b in doc["by_round"]]
        ax.plot(rounds, [100 * (v or 0.0) for v in vals], "s--", color=f"C{i + 1}", lw=1, label=f"split {sp}")
    ax.set_xticks(rounds)
    ax.set_xlabel("refine rounds")
    ax.set_ylabel("accepted %")
    ax.set_ylim(0, 100)
    ax.set_title("Acceptance after each refine round", fontsize=10)
    ax.legend(fontsize=7)
    return save_figure(fig, path)


@holds_output()
def run(cfg: ProverBenchConfig, generator_engine: Engine | None = None) -> dict[str, Any]:
    """Generate, judge (pool), refine, score and report; returns the metrics document (``generator_engine``:
    instead of ``cfg.generator``'s endpoint, e.g. ``vllm.LLM`` on a just-trained prover)."""
    cfg.validate()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    problems = load_proofbench_problems(cfg.problems)
    if cfg.limit is not None:
        problems = problems[: cfg.limit]
    (out / "config.json").write_text(json.dumps(asdict(_redacted(cfg)), indent=2, default=str) + "\n")
    res = run_rounds(problems, cfg, out, generator_engine)
    counts = res["counts"]
    rows = res["rows"][0]
    labels = member_labels(members(cfg))
    first = [res["trajs"][ids[0]] for ids in res["chain"].values() if ids]
    decisions = res["decisions"] if cfg.pool.verifiers else None
    doc = score(first, rows, cfg, decisions)
    if cfg.pool.verifiers:  # each model's acceptance beside the pool's (round 0)
        spec = cfg.bootstrap
        scored = [t for t in first if res["decisions"].get(t.id) is not None]
        doc["pool"] = {"rule": cfg.pool.rule, "pool": doc["acceptance"]["overall"], "members": [
            {"label": lab, "model": ep.model, "acceptance": acceptance_table(
                scored, [not unfinished_thinking(t) and res["rows"][k][t.id].verdict is Verdict.VALID for t in scored],
                spec, ())["overall"]}
            for k, (lab, ep) in enumerate(zip(labels, members(cfg)))]}
        for m in doc["pool"]["members"]:
            doc[f"proverbench.acceptance.model.{m['label']}"] = m["acceptance"]
    extra: list[str] = []
    if cfg.refine.rounds:
        doc["refine"] = refine_doc(res, cfg)
        for b in doc["refine"]["by_round"]:
            doc[f"proverbench.refine.round{b['round']}.acceptance"] = b["acceptance"]["overall"]
        png = plot_refine(doc["refine"], out / "refine.png")
        extra += [f"## Refine loop ({cfg.refine.rounds} rounds)", "",
                  ("A rejected proof goes back to the prover with the rationale of a rejecting pass; "
                  "acceptance of each (problem, sample) after round r (its version of some round <= r accepted)."),
                  ""]
        extra += md_rows(["round", "accepted %", "95% CI", "accepted / n", *(f"split {s}" for s in _splits(doc))],
                         [[b["round"], pct(b["acceptance"]["overall"], ci=False),
                           _ci(b["acceptance"]["overall"]),
                           f"{b['acceptance']['overall']['counts']['accepted']}/{b['acceptance']['overall']['counts']['n']}",
                           *(pct((b["acceptance"].get("split") or {}).get(s), ci=False) if
                             (b["acceptance"].get("split") or {}).get(s) else "-" for s in _splits(doc))]
                          for b in doc["refine"]["by_round"]])
        extra += ["", f"![acceptance against refine rounds]({png.name})", ""]
    if cfg.pool.verifiers:
        extra += [f"## Judge pool (rule: {cfg.pool.rule})", ""]
        extra += md_rows(["verifier", "accepted % [95% CI]", "accepted / n"],
                         [[m["label"], pct(m["acceptance"]),
                           f"{m['acceptance']['counts']['accepted']}/{m['acceptance']['counts']['n']}"]
                          for m in doc["pool"]["members"]]
                         + [[f"pool ({cfg.pool.rule})", pct(doc["pool"]["pool"]),
                             f"{doc['pool']['pool']['counts']['accepted']}/{doc['pool']['pool']['counts']['n']}"]])
        extra += [""]
    doc["run"] = {**counts, "generator": generator_engine.model if generator_engine else cfg.generator.model, "verifier": cfg.verifier.model,
                  "pool": labels if cfg.pool.verifiers else None, "proofs_per_problem": cfg.proofs_per_problem}
    doc["inputs"] = {"problems": str(cfg.problems), "proofs": str(out / "proofs.jsonl"),
                     "judgments": str(out / "judgments.jsonl")}
    doc["config"] = asdict(_redacted(cfg))
    path = write_metrics(out, doc)
    title = cfg.title or f"ProverBench: {cfg.generator.model} judged by {' + '.join(labels)}"
    print_table(doc, title)
    browser_index = cfg.browser_index
    all_versions = list(res["trajs"].values())
    if browser_index is None:  # the report links the judgment browser of this run (eval.browse)

        browser_index = write_browser_for_run(out / "judgments.jsonl", all_versions, out / "browser", title=title)
    report = write_report(out, doc, title=title, browser_index=browser_index, extra=extra)
    missing = counts.get("generation_failed", 0) + counts.get("judge_incomplete", 0)
    if missing:
        print(f"warning: {missing} proofs had failed requests and were not scored; re-run the same command "
              "to finish them")
    if cfg.wandb.enabled:
        table_rows = [{"id": t.id, "problem_id": t.problem_id, "split": t.split, "subject": t.subject,
                       "round": t.meta.get("round", 0), "generation_status": t.meta.get("generation_status"),
                       "verdict": _verdict(rows.get(t.id)), "pool_accepts": res["decisions"].get(t.id),
                       "n_accept": None if t.id not in rows else rows[t.id].aggregate.n_accept,
                       "n_passes": None if t.id not in rows else rows[t.id].aggregate.n_passes,
                       "proof": "\n\n".join(t.proof_steps)[:2000]}
                      for t in all_versions if t.id in rows or unfinished_thinking(t)]
        log_eval(out, doc, cfg=asdict(_redacted(cfg)), wandb_cfg=cfg.wandb, rows=table_rows,
                 job_type="proverbench")
    print(f"wrote {path} and {report}")
    return doc


def _verdict(j: Judgment | None) -> str | None:
    return None if j is None or j.verdict is None else j.verdict.value


def _splits(doc: dict[str, Any]) -> list[str]:
    return sorted({s for b in doc["refine"]["by_round"] for s in (b["acceptance"].get("split") or {})})


def _ci(m: dict[str, Any]) -> str:
    return ci_text(m)


def md_rows(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    return md_table(header, rows)


def _redacted(cfg: ProverBenchConfig) -> ProverBenchConfig:
    def red(ep: EndpointConfig) -> EndpointConfig:
        return dataclasses.replace(ep, api_key="***" if ep.api_key else None)

    pool = dataclasses.replace(cfg.pool, verifiers=[red(e) for e in cfg.pool.verifiers])
    return dataclasses.replace(cfg, generator=red(cfg.generator), verifier=red(cfg.verifier), pool=pool)


def main() -> None:
    hydra_main("proverbench", ProverBenchConfig)(run)()


if __name__ == "__main__":
    main()
