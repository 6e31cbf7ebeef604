"""`make bench-ladder`: Table 3 (section 5.4) on proofs a prover wrote, with a simulated expert (issue: Table 3 in shape).

Every stage is the user's own command path at CPU scale; the synthetic task's exact checker
(``data_pipeline.synthetic_check``) stands in for the expert (``data_pipeline.simulated_expert``) and labels the
held-out proofs, so every rung is measured against exact truth:

1. ``provers``: the tiny model SFT'd on gold proofs (B.1 prompt, plus the revision and repair prompts so that it
   can follow a critique or an expert's correction), checkpoints at ``prover_ckpts`` steps: provers of different
   true accuracies; ``verifier``: the SFT warm start on planted errors (``base``: the errors we plant);
2. ``candidates``: served provers (vLLM), each at ``temperatures``, ``k`` proofs per problem with ``rounds`` of
   iterative revision criticised by the served warm-start verifier (``data_pipeline.candidates``), on annotation-
   pool problems and on held-out problems (in no training set); the held-out proofs are labelled by the checker;
   the error mix and true rate per generator are reported;
3. ``selection``: verifier-uncertainty selection of ``budget`` pool proofs (``data_pipeline.selection``, 8 passes),
   and a random queue of the same size; each queue goes ``annotate export`` -> simulated expert (Label Studio
   export) -> ``data_pipeline.ingest``; ``augment``: the prover repairs each invalid annotated proof from the
   expert's correction, kept only if the strong check passes (``repair_check``: exact | verifiers);
4. ``grpo_data``: the variants base / extra_ann / pos_aug (and extra_ann from the random queue) with
   ``data_pipeline.grpo_dataset`` over one held-out set;
5. ``rows``: GRPO (``training.grpo.run``) from the warm start, ``seeds`` per row: rough_rl and meta_ver_rl (base),
   extra_ann, pos_aug, extra_ann_random; every model judged on the held-out prover proofs with 8 passes. Rows
   1-5 are scored per pass (one verification per proof, the paper's protocol before Pess-Ver); pess_ver is
   pos_aug's weights scored by the 8-pass pessimistic decision.

Resumable: each stage records its settings (``bench/common.done_stage``); a killed run re-run with the same
options resumes at the stage it was in; other options are an error naming them. Options as ``key=value``
(``LadderConfig``); ``until=STAGE`` stops after a stage. Writes OUT/report.{json,md} and OUT/ladder.png. Last line,
exactly: ``meta_vs_rough_meta_f1=<r> meta_vs_rough_ci_low=<r> extra_ann_meta_tnr_delta=<r> extra_ann_ci_low=<r>
pos_aug_tpr_delta=<r> pos_aug_ci_low=<r> pess_tnr_delta=<r> pess_ci_low=<r> final_vs_base_meta_f1=<r>
final_vs_base_ci_low=<r> selection_vs_random_meta_f1=<r> selection_vs_random_ci_low=<r> false_accept_base=<r>
false_accept_final=<r>``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import (InputError, Servers, done_stage, environment, last_line, mark_done, run_command, run_workers,
                          option_key, set_options, settings_of)
from training.ladder import ROW_DATA, row_config
from training.prover_reward import disjoint_problems
from training.stages import run_stage

environment(wandb=True)

from data_pipeline import synthetic_recipes as recipes
from training.tiny_task import TinyTask
from verifier.errors import UserError

STAGES = ("provers", "verifier", "candidates", "selection", "repairer", "augment", "held_out", "grpo_data", "rows", "report")
@dataclass
class LadderConfig(TinyTask):
    """Model and task: ``training.tiny_task.TinyTask`` (the demo's tiny model; 3-step chains of one-digit operands)."""

    out: str = "runs/bench_ladder"
    seed: int = 0  # model, data and SFT seed
    seeds: str = "0,1,2"  # GRPO seeds of every trained row
    until: str = "report"  # stop after this stage
    workers: int = 2  # GRPO rows in this many processes (1 core each)
    # provers: SFT on gold proofs, a checkpoint every prover_save_every steps; the checkpoints at prover_ckpts steps
    # are the generators (chosen from their true rates on pool problems: reports/table3_prover_proofs.md)
    prover_sft_steps: int = 1200
    prover_save_every: int = 300
    prover_ckpts: str = "900,1200"
    prover_lr: float = 3e-3
    sft_batch: int = 16
    temperatures: str = "0.5,1.0"  # every checkpoint at each temperature: several generators
    # verifier warm start: planted errors only (what the verifier knew before the pipeline)
    n_verifier_sft: int = 3600
    verifier_sft_steps: int = 300
    verifier_lr: float = 3e-3
    style: str = "stepwise"  # re-checks every operation (a format that can name a wrong result; "check" cannot)
    max_completion_length: int = 112
    # candidates
    n_pool_problems: int = 150  # annotation pool
    n_heldout_problems: int = 60  # held-out proofs: k x generators x (rounds + 1) per problem, at most
    k: int = 2
    rounds: int = 1
    prover_max_tokens: int = 64
    # selection and annotation
    budget: int = 200  # proofs the expert annotates (uncertainty and random queues alike; the pool diagnosis)
    per_problem_cap: int = 2
    select_passes: int = 8
    repair_check: str = "exact"  # exact | verifiers (the warm-start verifier, 8 pessimistic passes)
    repair_attempts: int = 2
    # the repairer (section 4.2's strong model): the strongest generator further SFT'd on the revision and repair
    # prompts of the provers' SFT problems only, for this many steps (0: the strongest generator as is). The pool
    # diagnosis found 0 of 344 repairs by the generator itself passing the check: it does not read the problem out
    # of the long repair prompt (reports/table3_prover_proofs.md, "Budgets").
    repairer_sft_steps: int = 300
    # GRPO rows (the same budget for every row)
    n_grpo: int = 256  # base: planted-error records on fresh problems
    grpo_steps: int = 32
    grpo_batch: int = 32
    num_generations: int = 8
    grpo_lr: float = 3e-5
    temperature: float = 0.5
    eval_passes: int = 8
    bootstrap_n: int = 1000
    resume: bool = True
    only: str = ""  # worker: "row/seed,row/seed" (internal)


def parse_options(argv: list[str]) -> LadderConfig:
    """``key=value`` options onto ``LadderConfig``; an unknown or ill-typed key is one clear error."""
    cfg = set_options(LadderConfig(), argv)
    if cfg.until not in STAGES:
        raise InputError(f"until={cfg.until!r}: use one of {', '.join(STAGES)}")
    if cfg.repair_check not in ("exact", "verifiers"):
        raise InputError(f"repair_check={cfg.repair_check!r}: use exact or verifiers")
    if cfg.repairer_sft_steps < 0:
        raise InputError(f"repairer_sft_steps={cfg.repairer_sft_steps}: use 0 (the strongest generator "
                         "repairs as is) or a number of SFT steps")
    if cfg.grpo_batch % cfg.num_generations or cfg.budget < 1 or cfg.eval_passes < 1:
        raise InputError("grpo_batch must be a multiple of num_generations; budget, eval_passes >= 1")
    return cfg


def task(cfg: LadderConfig) -> dict[str, Any]:
    return {"min_steps": cfg.min_steps, "max_steps": cfg.max_steps, "max_operand": cfg.max_operand,
            "recoverable_rate": 0.0, "qe_fraction": 0.0, "subjects": ["arithmetic"], "problem_id_from_text": True}


class Bench:
    """The stages, each resumable (a marker with the stage's settings)."""

    def __init__(self, cfg: LadderConfig, argv: list[str]):
        self.cfg, self.argv, self.out = cfg, argv, Path(cfg.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.t0 = time.monotonic()
        self.servers = Servers(self.out, 1024)

    def log(self, msg: str) -> None:
        print(f"[bench-ladder {time.monotonic() - self.t0:6.0f}s] {msg}", flush=True)

    def stage(self, name: str, settings: dict[str, Any], fn) -> Any:
        try:  # a data stage that refuses its input: one line naming the stage and the key
            return run_stage(self.out / name, "bench_done.json", json.loads(json.dumps(settings, default=str)), fn,
                             self.cfg.resume, self.log, name)
        except UserError as e:
            raise InputError(f"stage {name}: {e.cli_message()}") from None

    # ------------------------------------------------------------------ stages
    def problems(self) -> dict[str, list[Any]]:
        """Problems: prover SFT (seed+1), verifier data (its own), pool (seed+2), held-out (seed+3); a held-out
        problem is in no training set (the one leak check, by text)."""
        cfg = self.cfg
        sft, pool, held = disjoint_problems({k: v for k, v in task(cfg).items() if k != "problem_id_from_text"},
                                            cfg.seed, cfg.n_prover_sft, cfg.n_pool_problems, cfg.n_heldout_problems)
        if len(held) < cfg.n_heldout_problems or len(pool) < cfg.n_pool_problems:
            raise InputError(f"only {len(pool)} pool and {len(held)} held-out problems outside the "
                             "training sets: lower n_pool_problems / n_heldout_problems or raise max_operand")
        return {"sft": sft, "pool": pool, "held": held}

    def provers(self, d: Path) -> dict[str, Any]:
        from datasets import Dataset

        from training.sft import cpu_sft_config, sft_train
        from verifier.tiny_model import TinyModelConfig, build

        cfg = self.cfg
        model = build(TinyModelConfig(out=str(self.out / "model"), seed=cfg.seed, hidden_size=cfg.hidden_size,
                                      num_layers=cfg.num_layers, intermediate_size=cfg.intermediate_size))
        ds = Dataset.from_list(recipes.prover_sft_rows(self.problems()["sft"], cfg.seed + 1))
        sft_train(cpu_sft_config(d / "sft", model, max_steps=cfg.prover_sft_steps,
                                 per_device_train_batch_size=cfg.sft_batch, learning_rate=cfg.prover_lr, seed=cfg.seed,
                                 save_steps=cfg.prover_save_every, save_total_limit=None,
                                 lr_scheduler_type="constant"), [], dataset=ds)
        ckpts = {str(s): str(d / "sft" / ("final" if s == cfg.prover_sft_steps else f"checkpoint-{s}"))
                 for s in range(cfg.prover_save_every, cfg.prover_sft_steps + 1, cfg.prover_save_every)}
        return {"model": str(model), "checkpoints": ckpts}

    def generators(self, checkpoints: dict[str, str]) -> dict[str, str]:
        """The provers that write candidates: the checkpoints at ``prover_ckpts`` steps."""
        out = {}
        for s in self.cfg.prover_ckpts.split(","):
            if s.strip() not in checkpoints:
                raise InputError(f"prover_ckpts={self.cfg.prover_ckpts}: no checkpoint at step {s} "
                                 f"(saved: {', '.join(checkpoints)})")
            out[f"prover{s.strip()}"] = checkpoints[s.strip()]
        return out

    def verifier(self, d: Path, model: str) -> dict[str, Any]:
        from training.config import DataConfig
        from training.data import load_trajectories_for
        from training.sft import cpu_sft_config, sft_train
        from verifier.io import write_jsonl

        cfg = self.cfg
        data = DataConfig(source="synthetic", n_train=cfg.n_verifier_sft, n_eval=0, seed=cfg.seed + 4,
                          prompt_template="verify_compact",
                          synthetic={**task(cfg), **recipes.PLANTED_ERRORS})
        train, _ = load_trajectories_for(data)
        path = sft_train(cpu_sft_config(d / "sft", model, data=data, style=cfg.style, max_steps=cfg.verifier_sft_steps,
                                        per_device_train_batch_size=cfg.sft_batch, learning_rate=cfg.verifier_lr,
                                        seed=cfg.seed, save_steps=0), train)
        write_jsonl(d / "sft_train.jsonl", train)
        return {"verifier": str(path)}

    def judge(self, n: int, early_stop: bool = False):
        from verifier.judging import JudgeConfig

        return JudgeConfig(n=n, policy="pessimistic", early_stop=early_stop, with_reference=False,
                           template="verify_compact", max_tokens=self.cfg.max_completion_length,
                           temperature=self.cfg.temperature, run_seed=self.cfg.seed)

    def candidates(self, d: Path, part: str, provers: dict[str, str], verifier: str) -> dict[str, Any]:
        """Candidate proofs of the ``part`` problems (pool | held) by every generator at every temperature, with
        ``rounds`` of revision criticised by the warm-start verifier; the error mix per generator."""
        from data_pipeline import candidates as cand
        from verifier.io import load_trajectories, write_jsonl

        cfg = self.cfg
        temps = [float(t) for t in cfg.temperatures.split(",")]
        eps = {name: self.servers.endpoint(name, path) for name, path in provers.items()}  # one server per prover
        gens, tlist = [ep for ep in eps.values() for _ in temps], [t for _ in eps for t in temps]
        write_jsonl(d / "problems.jsonl", [dataclasses.asdict(p) for p in self.problems()[part]])
        summary = cand.run(cand.CandidatesConfig(
            problems=str(d / "problems.jsonl"), out=str(d), generators=gens, temperatures=tlist, k=cfg.k,
            rounds=cfg.rounds, critic="verifier", verifier=self.servers.endpoint("verifier", verifier),
            critique=cand.CriticConfig(n=1, template="verify_compact", temperature=cfg.temperature,
                                       max_tokens=cfg.max_completion_length),
            max_tokens=cfg.prover_max_tokens, run_seed=cfg.seed + (0 if part == "pool" else 1), progress=True))
        result = {"summary": summary, "error_mix": recipes.error_mix(load_trajectories(d / "candidates.jsonl").records)}
        if part == "held":  # the evaluation labels: the exact checker's annotation of every held-out proof
            held = recipes.label_held_out(load_trajectories(d / "candidates.jsonl").records)
            write_jsonl(d / "held_out.jsonl", held)
            result["held_out"] = {"proofs": len(held), "false": sum(not t.annotation.is_valid for t in held),
                                  "problems": len({t.problem_id for t in held})}
        self.log(f"candidates ({part}): {summary['candidates_total']} proofs; error mix {result['error_mix']}")
        return result

    def selection(self, d: Path, verifier: str, cand_dir: Path) -> dict[str, Any]:
        from data_pipeline.selection import SelectConfig, run
        from verifier.io import load_trajectories, write_jsonl

        cfg = self.cfg
        ep = self.servers.endpoint("verifier", verifier)
        run(SelectConfig(trajectories=str(cand_dir / "candidates.jsonl"), out=str(d / "uncertainty"),
                         endpoint=ep, judge=self.judge(cfg.select_passes), budget=cfg.budget,
                         per_problem_cap=cfg.per_problem_cap, seed=cfg.seed, progress=True))
        pool = load_trajectories(cand_dir / "candidates.jsonl").records
        write_jsonl(d / "random" / "annotation_queue.jsonl",
                    recipes.random_queue(pool, cfg.budget, cfg.per_problem_cap, cfg.seed))
        return {"warm_start_on_pool": recipes.pass_acceptance(pool, d / "uncertainty" / "judgments.jsonl"),
                **{q: recipes.simulated_expert_annotation(d / q, d / q / "annotation_queue.jsonl", cfg.budget)
                   for q in ("uncertainty", "random")}}

    def repairer(self, d: Path, provers: dict[str, str]) -> dict[str, Any]:
        """The strongest generator, SFT'd further on revision and repair prompts (the provers' SFT problems)."""
        from datasets import Dataset

        from training.sft import cpu_sft_config, sft_train

        cfg = self.cfg
        name = list(provers)[-1]
        if cfg.repairer_sft_steps == 0:
            return {"model": provers[name], "from": name, "steps": 0}
        rows = recipes.prover_sft_rows(self.problems()["sft"], cfg.seed + 2, repair_fraction=1.0)
        sft_train(cpu_sft_config(d / "sft", provers[name], max_steps=cfg.repairer_sft_steps,
                                 per_device_train_batch_size=cfg.sft_batch, learning_rate=cfg.prover_lr, seed=cfg.seed,
                                 save_steps=10_000, lr_scheduler_type="constant"), [], dataset=Dataset.from_list(rows))
        return {"model": str(d / "sft" / "final"), "from": name, "steps": cfg.repairer_sft_steps, "rows": len(rows)}

    def augment(self, d: Path, repairer: str, verifier: str, sel_dir: Path) -> dict[str, Any]:
        from data_pipeline.augment import AugmentConfig, run

        cfg = self.cfg
        gen = self.servers.endpoint("repairer", repairer)
        verifiers = [self.servers.endpoint("verifier", verifier)] if cfg.repair_check == "verifiers" else []
        return run(AugmentConfig(input=str(sel_dir / "uncertainty" / "ingested"), out=str(d), generator=gen,
                                 verifiers=verifiers, check=cfg.repair_check, attempts=cfg.repair_attempts,
                                 temperature=cfg.temperature, max_tokens=cfg.prover_max_tokens,
                                 verify=self.judge(8, early_stop=True), run_seed=cfg.seed, progress=True))

    def grpo_data(self, d: Path, held_dir: Path, sel_dir: Path, aug_dir: Path, verifier_dir: Path) -> dict[str, Any]:
        from data_pipeline.synthetic import generate_synthetic
        from verifier.identity import ProblemIndex
        from verifier.io import load_trajectories

        cfg = self.cfg
        if not (aug_dir / "positives.jsonl").is_file():  # no repair passed the check: pos_aug has nothing to add
            (aug_dir / "positives.jsonl").write_text("")
        held = load_trajectories(held_dir / "held_out.jsonl").records
        taken = ProblemIndex([*held, *load_trajectories(verifier_dir / "sft_train.jsonl").records])
        pool = generate_synthetic(cfg.n_grpo * 8, seed=cfg.seed + 5, **{**task(cfg), **recipes.PLANTED_ERRORS})
        base = [t for t in pool if taken.shared(t) is None][: cfg.n_grpo]
        if len(base) < cfg.n_grpo:
            raise InputError(f"only {len(base)} base GRPO records on fresh problems")
        return recipes.grpo_variants(d, held, base, {"data": sel_dir / "uncertainty" / "ingested",
                                                     "data_random": sel_dir / "random" / "ingested"},
                                     aug_dir / "positives.jsonl", cfg.seed)

    def one_row(self, name: str, warm: str) -> None:
        """Train (or for ``base`` only evaluate) one row / seed; resumable by its marker."""
        from training.grpo import run

        rc = row_config(self.cfg, self.out / "rows", self.out / "grpo_data", name, warm)
        marker, settings = self.out / "rows" / name / "bench_done.json", settings_of(rc)  # before run fills paths
        if done_stage(marker, settings, self.cfg.resume):
            return
        run(rc)
        mark_done(marker, settings)

    def rows(self, warm: str) -> list[str]:
        names = ["base", *(f"{r}/seed{s}" for s in self.cfg.seeds.split(",") for r in ROW_DATA)]
        if self.cfg.only:
            for n in self.cfg.only.split(","):
                self.log(f"row {n}")
                self.one_row(n, warm)
            return names
        self.one_row("base", warm)
        todo = [n for n in names[1:] if not (self.out / "rows" / n / "bench_done.json").is_file()]
        groups = [todo[k::self.cfg.workers] for k in range(self.cfg.workers) if todo[k::self.cfg.workers]]
        keep = [a for a in self.argv if option_key(a) not in ("only", "workers")]
        script = str(Path(__file__).resolve())
        failed = run_workers([(f"{len(g)} runs", str(g), [script, *keep, f"only={','.join(g)}"]) for g in groups],
                             self.out, self.log)
        if failed:
            raise SystemExit(f"bench-ladder: workers failed: {'; '.join(failed)}; see {self.out}/worker*.log "
                             "(finished runs are kept: the same command resumes them)")
        for n in names:  # every run finished (resumed here)
            self.one_row(n, warm)
        return names


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    cfg = parse_options(argv)
    import torch

    # the sequential stages may use both cores; a worker of the rows stage one (workers share the machine)
    torch.set_num_threads(1 if cfg.only else min(2, os.cpu_count() or 1))
    b = Bench(cfg, argv)
    c = dataclasses.asdict(cfg)
    keys = lambda *names: {k: c[k] for k in names}  # noqa: E731 (each stage's settings)
    model_keys = ("seed", "hidden_size", "num_layers", "intermediate_size", "min_steps", "max_steps", "max_operand")
    try:
        p = b.stage("provers", {**keys(*model_keys, "n_prover_sft", "prover_sft_steps", "prover_save_every",
                                       "prover_lr", "sft_batch"), "recipe": "prover_sft_rows/2"}, b.provers)
        until = STAGES.index(cfg.until)
        v = b.stage("verifier", keys(*model_keys, "n_verifier_sft", "verifier_sft_steps", "verifier_lr", "style",
                                     "sft_batch"), lambda d: b.verifier(d, p["model"]))
        if cfg.only:  # a worker of the rows stage
            b.rows(v["verifier"])
            return
        if until < STAGES.index("candidates"):
            return
        cand_keys = (*model_keys, "n_prover_sft", "prover_sft_steps", "prover_save_every", "prover_lr", "sft_batch",
                     "prover_ckpts", "temperatures", "n_pool_problems", "n_heldout_problems", "k", "rounds",
                     "prover_max_tokens", "max_completion_length", "temperature")
        gens = b.generators(p["checkpoints"])
        cd = b.stage("candidates", keys(*cand_keys), lambda d: b.candidates(d, "pool", gens, v["verifier"]))
        if until < STAGES.index("selection"):
            return
        sel_keys = (*cand_keys, "budget", "per_problem_cap", "select_passes")
        sel = b.stage("selection", keys(*sel_keys), lambda d: b.selection(d, v["verifier"], b.out / "candidates"))
        b.log(f"selection: the warm-start verifier on pool proofs {sel.get('warm_start_on_pool')}")
        if until < STAGES.index("repairer"):
            return
        rep = b.stage("repairer", keys(*cand_keys, "repairer_sft_steps"), lambda d: b.repairer(d, gens))
        if until < STAGES.index("augment"):
            return
        aug = b.stage("augment", keys(*sel_keys, "repair_check", "repair_attempts", "repairer_sft_steps"),
                      lambda d: b.augment(d, rep["model"], v["verifier"], b.out / "selection"))
        b.log(f"augment: {aug.get('positives_total')} positives, {aug.get('rejected_total')} rejected repairs")
        if until < STAGES.index("held_out"):
            return
        held = b.stage("held_out", keys(*cand_keys), lambda d: b.candidates(d, "held", gens, v["verifier"]))
        if until < STAGES.index("grpo_data"):
            return
        b.stage("grpo_data", keys(*sel_keys, "repair_check", "repair_attempts", "repairer_sft_steps", "n_grpo"),
                lambda d: b.grpo_data(d, b.out / "held_out", b.out / "selection", b.out / "augment",
                                      b.out / "verifier"))
    finally:
        b.servers.stop()
    if until < STAGES.index("rows"):
        return
    names = b.rows(v["verifier"])
    if until < STAGES.index("report"):
        return
    from eval.ladder_report import line_values, report

    last_line(line_values(report(b.out, cfg, names, {"pool": cd, "held": held})))


if __name__ == "__main__":
    run_command("bench-ladder", main)
