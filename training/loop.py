"""The prover-verifier loop as one command: a prover and its verifier improve each other, round after round.

``python -m training.loop out=DIR rounds=R annotator=simulated_expert|autolabel|export:PATH [key=value ...]``
(schema :class:`LoopConfig`, mirrored by ``configs/loop.yaml``; docs/prover.md, "The loop").

Round 0 sets the loop up: the tiny model (or ``base_model``) SFT'd on the task's gold proofs (the prover), the
verifier's SFT warm start on planted errors (the first verifier), and prover GRPO against that verifier. Each round
r >= 1 then runs, with the prover and the verifier of round r-1:

(a) ``proofs``: the served prover writes ``k`` proofs per problem of the round (``data_pipeline.candidates``, the
    one generation runner);
(b) ``selection``: verifier-uncertainty selection of ``budget`` proofs with the current verifier (section 4.1,
    ``data_pipeline.selection``);
(c) ``annotate``: the queue is annotated (appendix C) by the simulated expert through the Label Studio export and
    ``data_pipeline.ingest`` (``annotator=simulated_expert``), by a human export of that queue
    (``annotator=export:PATH``, ``{round}`` in PATH is the round), or labelled without an expert
    (``annotator=autolabel``, ``data_pipeline.autolabel``: the current verifier as verifier and meta-verifier);
(d) ``augment``: repair augmentation of the invalid annotated proofs from the expert's correction (section 4.2);
(e) ``verifier``: the verifier retrained on the grown data (planted errors + every round's annotations and
    repairs, ``data_pipeline.grpo_dataset``): an SFT refresh, then Meta-Ver-RL GRPO (section 4.3);
(f)+(g) ``prover``: the new verifier served, the prover continues GRPO against it (prover reward, section 3.3);
``heldout``: the prover's held-out proofs (problems in no training set), judged by the new verifier with
``eval_passes`` pessimistic passes (section 4.4): prover true accuracy, acceptance and hacking rate (the exact
checker), and the verifier's Rough / Meta Balanced F1 and false-acceptance rate on them (section 5.4), in
``OUT/round_{r}/heldout.json``; one W&B run per round (group: the out folder's name).

Every stage writes into ``OUT/round_{r}/{stage}/`` and is recorded done with its settings
(``training.stages``): re-running the same command resumes at the stage it was in; other options are a one-line
error naming them. ``OUT/report.md`` (one row per round, the true-accuracy gain over round 0 with a paired CI
clustered by problem) and ``OUT/loop.png`` are rewritten at the end.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_pipeline import candidates as cand
from data_pipeline import synthetic_recipes as recipes
from data_pipeline.annotate import AnnotateConfig, export
from data_pipeline.augment import AugmentConfig
from data_pipeline.augment import run as augment_run
from data_pipeline.autolabel import AutolabelConfig
from data_pipeline.autolabel import run as autolabel
from data_pipeline.grpo_dataset import GrpoDataConfig, write_variant
from data_pipeline.ingest import IngestConfig
from data_pipeline.ingest import run as ingest
from data_pipeline.selection import SelectConfig
from data_pipeline.selection import run as select_run
from data_pipeline.simulated_expert import SimulatedExpertConfig
from data_pipeline.simulated_expert import run as simulate
from data_pipeline.synthetic import generate_synthetic
from data_pipeline.synthetic_check import check_proof, gold_proof
from eval.metrics import Prediction, ScoreOptions, score_predictions
from eval.stats import BootstrapSpec, mean_delta_ci
from eval.verifierbench import representative_pass
from training.config import (DataConfig, EvalConfig, GRPORunConfig, GRPOSettings, ModelConfig, WandbSettings,
                             heldout_judge)
from training.data import load_trajectories_for
from training.grpo import run as grpo_run
from training.prover_reward import AuditConfig, ProverRLConfig, evaluate_prover, gold_table, synthetic_problems
from training.rewards import RewardConfig
from training.sft import SFTRunConfig, gold_text, sft_train
from training.stages import done_stage, mark_done, run_stage
from training.tiny_task import ProverBudget
from verifier.config import MetaVerifierConfig, hydra_main
from verifier.config import EndpointConfig
from verifier.errors import InputError
from verifier.formats import load_any, load_proofbench_problems
from verifier.identity import ProblemIndex
from verifier.io import load_trajectories, write_jsonl
from verifier.judging import JudgeConfig
from verifier.engine import OpenAIEngine
from verifier.judgment import Judgment, load_judgments
from verifier.meta_verifier import RuleMetaVerifier
from verifier.records import ProofTrajectory, Verdict
from verifier.runner import judge as judge_records
from verifier.results import WandbConfig, figure, init_run, md_table, save_figure, write_markdown
from verifier.serve import ServeConfig, VLLMServer, free_port
from verifier.templates import as_messages, verification_prompt
from verifier.tiny_model import TinyModelConfig, build

ANNOTATORS = ("simulated_expert", "autolabel")  # or export:PATH
ROUND0_STAGES = ("prover_sft", "verifier", "prover", "heldout")
ROUND_STAGES = ("proofs", "selection", "annotate", "augment", "verifier", "check", "prover", "heldout")
# options that change no stage's work (left out of every stage's recorded settings)
RUN_KEYS = ("out", "resume", "progress", "wandb", "share_round0", "rounds")
# options of the rounds r >= 1 only (round 0 ignores them, so two loops may share one round 0: share_round0)
ROUND_KEYS = ("annotator", "k", "budget", "per_problem_cap", "select_passes", "autolabel_n", "autolabel_m",
              "autolabel_k", "repair_check", "repair_attempts", "n_base", "refresh_sft_steps", "verifier_grpo_steps",
              "verifier_grpo_lr", "prover_from", "annotation_weight")
# round options added after loop folders were recorded: left out of the settings at these defaults (those folders resume)
LATE_DEFAULTS = {"prover_from": "previous", "annotation_weight": 1, "prover_sft_checkpoint": 0,
                 "prover_sft_from": None}
PROVER_FROM = ("previous", "sft")
HELDOUT_KEYS = ("true_acc", "accept", "hacking_rate", "verifier_rough_bf1", "verifier_meta_bf1",
                "verifier_false_accept")


@dataclass
class LoopConfig(ProverBudget):
    """Options of ``python -m training.loop`` (mirrored by ``configs/loop.yaml``); the tiny model (unless
    ``base_model``), the synthetic task (exact truth) and the prover's budget: ``training.tiny_task.ProverBudget``."""

    out: str | None = None  # the loop's folder: OUT/round_{r}/{stage}/, OUT/report.md, OUT/loop.png
    rounds: int = 2  # rounds after round 0 (each: proofs, selection, annotation, repair, verifier, prover)
    annotator: str = "simulated_expert"  # simulated_expert | autolabel | export:PATH (a human export; {round})
    seed: int = 0
    resume: bool = True  # false: a finished stage in OUT is an error
    share_round0: str | None = None  # another loop's folder whose finished round 0 (same settings) is reused
    base_model: str | None = None  # a model folder, or null for the tiny model built here with the sizes above
    # the synthetic task's disjoint problem sets
    n_round_problems: int = 64  # problems per round (the prover writes proofs on them and trains on them)
    n_heldout: int = 45  # held-out problems (in no training set)
    eval_proofs: int = 1  # held-out proofs per problem (each judged by eval_passes passes; clustered by problem)
    heldout_problems: str | None = None  # a problems JSONL instead of synthetic held-out problems
    # the prover
    prover_sft_steps: int = 800
    # the SFT prover is this checkpoint of the prover_sft_steps schedule (0: its final weights): the warm start
    # with the most GRPO groups of mixed gold reward on training problems (make diagnose-control recipe=loop)
    prover_sft_checkpoint: int = 0
    # a finished SFT prover folder (this recipe's, e.g. a make diagnose-control recipe=loop checkpoint) instead of
    # the SFT here; the verifier's warm start still starts from the model built with the sizes above
    prover_sft_from: str | None = None
    grpo_steps: int = 48  # prover GRPO steps per round
    # (g) where each round's prover GRPO starts: previous (the last round's prover) | sft (round 0's SFT prover, so
    # that a round's prover has trained only against that round's verifier)
    prover_from: str = "previous"
    grpo_batch: int = 32
    grpo_lr: float = 1e-4
    reward_passes: int = 8  # verifier passes per proof in the prover reward
    reward_policy: str = "pessimistic"  # pessimistic | mean
    audit_every: int = 4  # the hack audit (exact checker) every this many reward steps (0: off)
    k: int = 2  # proofs per round problem in stage (a)
    # the verifier
    n_verifier_sft: int = 3600  # planted-error records of the warm start
    verifier_sft_steps: int = 300
    verifier_sft_lr: float = 3e-3
    verifier_style: str = "stepwise"  # the warm start's gold texts (training.sft: check | stepwise | short)
    verifier_template: str = "verify_compact"
    verifier_max_tokens: int = 112
    judge_temperature: float = 0.5
    n_base: int = 256  # planted-error records in every retraining's data (fresh problems)
    refresh_sft_steps: int = 50  # (e) SFT refresh on the grown data (0: none)
    verifier_grpo_steps: int = 16  # (e) Meta-Ver-RL GRPO on the grown data (0: none)
    verifier_grpo_lr: float = 3e-5
    # (b) selection and (c) annotation
    budget: int = 32  # proofs annotated per round
    per_problem_cap: int = 2
    select_passes: int = 8
    annotation_weight: int = 1  # (e) copies of each annotated proof in the retraining data (against the planted ones)
    autolabel_n: int = 8
    autolabel_m: int = 3
    autolabel_k: int = 4
    # (d) repair augmentation
    repair_check: str = "exact"  # exact | verifiers (the current verifier, 8 pessimistic passes)
    repair_attempts: int = 1
    # held-out evaluation (eval_passes, eval_temperature: ProverBudget's)
    bootstrap_n: int = 1000
    wandb: WandbConfig = field(default_factory=lambda: WandbConfig(project="proofverifier-loop", mode="auto"))
    progress: bool = True


def check_config(cfg: LoopConfig) -> None:
    """Every option that would fail later, as one error naming the key, before any work."""
    if not cfg.out:
        raise InputError("loop config, field 'out': out=DIR is required")
    if cfg.rounds < 1:
        raise InputError(f"loop config, field 'rounds': must be >= 1 (rounds after round 0), got {cfg.rounds}")
    if cfg.annotator not in ANNOTATORS and not (cfg.annotator.startswith("export:") and cfg.annotator[7:]):
        raise InputError(f"loop config, field 'annotator': use simulated_expert, autolabel or export:PATH, "
                         f"got {cfg.annotator!r}")
    if cfg.reward_policy not in ("pessimistic", "mean"):
        raise InputError(f"loop config, field 'reward_policy': use pessimistic or mean, got {cfg.reward_policy!r}")
    if cfg.prover_from not in PROVER_FROM:
        raise InputError(f"loop config, field 'prover_from': use previous or sft, got {cfg.prover_from!r}")
    if cfg.repair_check not in ("exact", "verifiers"):
        raise InputError(f"loop config, field 'repair_check': use exact or verifiers, got {cfg.repair_check!r}")
    if cfg.grpo_batch % cfg.num_generations:
        raise InputError(f"loop config, field 'grpo_batch': must be a multiple of num_generations "
                         f"({cfg.num_generations}), got {cfg.grpo_batch}")
    for key in ("budget", "eval_passes", "reward_passes", "select_passes", "k", "grpo_steps", "n_round_problems",
                "n_heldout", "eval_proofs", "n_prover_sft", "annotation_weight", "autolabel_n", "autolabel_m", "autolabel_k",
                "repair_attempts"):
        if getattr(cfg, key) < 1:
            raise InputError(f"loop config, field {key!r}: must be >= 1, got {getattr(cfg, key)}")
    if not 0 <= cfg.prover_sft_checkpoint <= cfg.prover_sft_steps:
        raise InputError(f"loop config, field 'prover_sft_checkpoint': 0 (the final weights) or a step <= "
                         f"prover_sft_steps ({cfg.prover_sft_steps}), got {cfg.prover_sft_checkpoint}")
    if cfg.prover_sft_from and not (Path(cfg.prover_sft_from) / "config.json").is_file():
        raise InputError(f"loop config, field 'prover_sft_from': {cfg.prover_sft_from} is not a model folder "
                         "(no config.json)")
    if cfg.prover_sft_from and cfg.prover_sft_checkpoint:
        raise InputError("loop config, fields 'prover_sft_from' and 'prover_sft_checkpoint': give one (a finished "
                         "SFT prover, or the checkpoint of the SFT here)")
    if cfg.autolabel_k > cfg.autolabel_n:
        raise InputError(f"loop config, field 'autolabel_k': at most autolabel_n ({cfg.autolabel_n}), "
                         f"got {cfg.autolabel_k}")
    if cfg.share_round0 and Path(cfg.share_round0).resolve() == Path(cfg.out).resolve():
        raise InputError("loop config, field 'share_round0': another loop's folder, not out itself")


def task(cfg: LoopConfig) -> dict[str, Any]:
    return {"min_steps": cfg.min_steps, "max_steps": cfg.max_steps, "max_operand": cfg.max_operand,
            "recoverable_rate": 0.0, "qe_fraction": 0.0, "subjects": ["arithmetic"]}


def gold_steps(cfg: LoopConfig) -> int:
    """The gold arm's GRPO steps: as many as the final prover's (every round's, or one round's with
    ``prover_from=sft``)."""
    return cfg.grpo_steps * (1 if cfg.prover_from == "sft" else cfg.rounds + 1)


def weight_records(trajs: Sequence[ProofTrajectory], ids: set[str], weight: int) -> list[ProofTrajectory]:
    """``trajs`` with ``weight - 1`` more copies of each record whose id is in ``ids`` (ids ``ID#w1``, ``ID#w2``,
    ...; same problem, so intervals cluster them together), each copy after its record."""
    out = []
    for t in trajs:
        out.append(t)
        if t.id in ids:
            out += [dataclasses.replace(t, id=f"{t.id}#w{i}") for i in range(1, weight)]
    return out


def decision_rates(judgments: Sequence[Judgment], labels: Sequence[bool | None]) -> dict[str, Any]:
    """How a verifier separates true from false proofs: TPR / TNR of its decisions (the judge's aggregation of its
    passes, as the prover's reward takes them), TPR / TNR of its single passes, and its mean acceptance fraction on
    true and on false proofs (what a ``mean`` reward pays). ``labels``: True (valid), False (invalid) or None (not
    labelled, left out and counted)."""
    c: dict[str, float] = {"true": 0, "false": 0, "unlabelled": 0, "dec_t": 0, "dec_f": 0, "pass_t": 0, "pass_f": 0,
                           "n_pass_t": 0, "n_pass_f": 0}
    for j, lab in zip(judgments, labels, strict=True):
        if lab is None:
            c["unlabelled"] += 1
            continue
        side = "t" if lab else "f"
        c["true" if lab else "false"] += 1
        c[f"dec_{side}"] += j.verdict is Verdict.VALID
        c[f"pass_{side}"] += sum(p.verdict is Verdict.VALID for p in j.passes)
        c[f"n_pass_{side}"] += len(j.passes)

    def rate(a: float, b: float) -> float | None:
        return a / b if b else None

    return {"true": int(c["true"]), "false": int(c["false"]), "unlabelled": int(c["unlabelled"]),
            "tpr": rate(c["dec_t"], c["true"]), "tnr": rate(c["false"] - c["dec_f"], c["false"]),
            "pass_tpr": rate(c["pass_t"], c["n_pass_t"]), "pass_tnr": rate(c["n_pass_f"] - c["pass_f"], c["n_pass_f"]),
            "accept_true": rate(c["pass_t"], c["n_pass_t"]), "accept_false": rate(c["pass_f"], c["n_pass_f"])}


def exact_truth(t: ProofTrajectory) -> bool | None:
    """The exact checker's verdict on a proof of a synthetic problem; None for any other problem."""
    c = check_proof(t.problem, t.proof_steps)
    return None if c.kind == "not_a_problem" else c.true


def check_disjoint(sets: Mapping[str, Sequence[Any]]) -> None:
    """No problem (by text) in two of the named sets: one error naming both sets and a shared problem."""
    owner: dict[str, str] = {}
    for name, problems in sets.items():
        shared: dict[str, list[str]] = {}
        for p in problems:
            other = owner.get(p.problem)
            if other is not None and other != name:
                shared.setdefault(other, []).append(p.problem)
        for other, texts in shared.items():
            raise InputError(f"problem sets overlap: {other} and {name} share {len(texts)} problems "
                             f"(e.g. {texts[0]!r}); every round's problems, the prover's SFT problems and the "
                             "held-out problems must be disjoint")
        for p in problems:
            owner.setdefault(p.problem, name)


def problem_sets(cfg: LoopConfig, rounds: int | None = None) -> dict[str, list[Any]]:
    """The prover's SFT problems, the held-out problems and the problems of rounds 0..R, disjoint by text.

    Synthetic sets are drawn in that order, each without the problems of the sets before it (a held-out file is
    taken as it is); a set that cannot be filled is an error naming it; ``check_disjoint`` asserts the result."""
    t = task(cfg)
    sets: dict[str, list[Any]] = {}
    taken: set[str] = set()

    def draw(name: str, n: int, seed: int, factor: int) -> list[Any]:
        pool = [p for p in synthetic_problems(n * factor, seed, **t) if p.problem not in taken][:n]
        if len(pool) < n:
            raise InputError(f"loop config: only {len(pool)} of {n} {name} problems outside the earlier sets "
                             f"({', '.join(sets) or 'none'}): lower its size or raise max_operand / max_steps")
        return pool

    if cfg.heldout_problems:
        held = load_proofbench_problems(cfg.heldout_problems)
        taken |= {p.problem for p in held}
    # the prover's SFT set: the distinct problems among n_prover_sft draws (the task has few distinct problems)
    sets["prover SFT"] = [p for p in synthetic_problems(cfg.n_prover_sft, cfg.seed + 1, **t) if p.problem not in taken]
    taken |= {p.problem for p in sets["prover SFT"]}
    if cfg.heldout_problems:
        sets["held-out"] = held
    else:
        sets["held-out"] = draw("held-out", cfg.n_heldout, cfg.seed + 3, 20)
    taken |= {p.problem for p in sets["held-out"]}
    for r in range(0, (cfg.rounds if rounds is None else rounds) + 1):
        sets[f"round {r}"] = draw(f"round {r}", cfg.n_round_problems, cfg.seed + 100 + r, 20)
        taken |= {p.problem for p in sets[f"round {r}"]}
    check_disjoint(sets)
    return sets


Serve = Callable[[str, str], Any]  # (name, model folder) -> EndpointConfig of a server of that model


class Loop:
    """The loop's stages, each resumable (``training.stages``); ``serve`` starts a server of a model folder (default:
    a vLLM server per model, stopped when no later stage needs it)."""

    def __init__(self, cfg: LoopConfig, serve: Serve | None = None):
        check_config(cfg)
        self.cfg, self.out = cfg, Path(cfg.out)
        self.t0 = time.monotonic()
        self.servers: dict[str, Any] = {}
        self._serve = serve
        self._sets: dict[str, list[Any]] | None = None
        c = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in RUN_KEYS}
        c = {k: v for k, v in c.items() if LATE_DEFAULTS.get(k, ...) != v}
        self.round_settings = json.loads(json.dumps(c, default=str))
        self.round0_settings = {k: v for k, v in self.round_settings.items() if k not in ROUND_KEYS}

    # ------------------------------------------------------------------ plumbing
    def log(self, msg: str) -> None:
        print(f"[loop {time.monotonic() - self.t0:6.0f}s] {msg}", flush=True)

    def sets(self) -> dict[str, list[Any]]:
        if self._sets is None:
            self._sets = problem_sets(self.cfg)
            d = self.out / "problems"
            d.mkdir(parents=True, exist_ok=True)
            for name, ps in self._sets.items():
                write_jsonl(d / f"{name.replace(' ', '_').replace('-', '_')}.jsonl",
                            [dataclasses.asdict(p) for p in ps])
        return self._sets

    def problems_file(self, name: str) -> Path:
        self.sets()
        return self.out / "problems" / f"{name.replace(' ', '_').replace('-', '_')}.jsonl"

    def stage(self, r: int, name: str, fn: Callable[[Path], dict[str, Any]], settings: Any = None) -> dict[str, Any]:
        """Run stage ``name`` of round ``r`` in ``OUT/round_{r}/{name}/`` unless it finished with these settings."""
        settings = settings if settings is not None else (self.round0_settings if r == 0 else self.round_settings)
        return run_stage(self.out / f"round_{r}" / name, "loop_done.json", settings, fn, self.cfg.resume, self.log,
                         f"round {r} {name}", say_start=True)

    def endpoint(self, name: str, model: str) -> Any:
        """The endpoint of a server of ``model`` (started once; ``name`` is its served name)."""
        if self._serve is not None:
            return self._serve(name, model)
        if model not in self.servers:
            self.log(f"serving {name} ({model})")
            self.servers[model] = (name, VLLMServer(ServeConfig(
                model=model, served_model_name=name, port=free_port(), api_key=None,
                log_file=str(self.out / f"vllm-{name}.log"), max_model_len=2048,
                max_num_batched_tokens=2048)).start())
        name, s = self.servers[model]
        return EndpointConfig(base_url=s.base_url, model=name, max_concurrency=64, timeout_s=300, max_retries=2)

    def keep(self, *models: str) -> None:
        """Stop every server except those of ``models``."""
        for m in [m for m in self.servers if m not in models]:
            self.servers.pop(m)[1].stop()

    def stop_servers(self) -> None:
        self.keep()

    def judge(self, n: int, early_stop: bool = False) -> Any:
        c = self.cfg
        return JudgeConfig(n=n, policy="pessimistic", early_stop=early_stop, with_reference=False,
                           template=c.verifier_template, max_tokens=c.verifier_max_tokens,
                           temperature=c.judge_temperature, run_seed=c.seed)

    # ------------------------------------------------------------------ round 0
    def prover_sft(self, d: Path) -> dict[str, Any]:
        """The model (``base_model`` or the tiny model) SFT'd on gold proofs, revisions and repairs; the prover is
        checkpoint ``prover_sft_checkpoint`` of the schedule (0: the final weights), or ``prover_sft_from``."""
        from datasets import Dataset  # lazy: datasets takes seconds to import; only SFT tables need it

        c = self.cfg
        model = c.base_model or str(build(TinyModelConfig(out=str(d / "model"), seed=c.seed, hidden_size=c.hidden_size,
                                                          num_layers=c.num_layers,
                                                          intermediate_size=c.intermediate_size)))
        if c.prover_sft_from:
            return {"model": str(model), "prover": str(Path(c.prover_sft_from).resolve()), "rows": 0}
        ds = Dataset.from_list(recipes.prover_sft_rows(self.sets()["prover SFT"], c.seed + 1))
        path = sft_train(SFTRunConfig(
            wandb=WandbConfig(enabled=False), output_dir=str(d / "sft"), model=ModelConfig(name_or_path=model),
            max_steps=c.prover_sft_steps, per_device_train_batch_size=c.sft_batch, learning_rate=c.prover_sft_lr,
            warmup_steps=min(5, c.prover_sft_steps), max_length=512, logging_steps=10, seed=c.seed,
            gradient_accumulation_steps=1, bf16=False, save_steps=c.prover_sft_checkpoint), [], dataset=ds)
        if c.prover_sft_checkpoint and c.prover_sft_checkpoint < c.prover_sft_steps:
            path = d / "sft" / f"checkpoint-{c.prover_sft_checkpoint}"
        return {"model": str(model), "prover": str(path), "rows": len(ds)}

    def verifier_warm_start(self, d: Path, model: str) -> dict[str, Any]:
        """The first verifier: SFT on planted errors (a wrong start value or answer, 10-20 off: what the verifier
        knew before the loop), on problems in no other set."""
        c = self.cfg
        data = DataConfig(source="synthetic", n_train=c.n_verifier_sft, n_eval=0, seed=c.seed + 4,
                          prompt_template=c.verifier_template,
                          synthetic={**task(c), "problem_id_from_text": True,
                                     "fatal_kinds": ["wrong_operand", "wrong_final"],
                                     "error_delta_min": 10, "error_delta_max": 20})
        train, _ = load_trajectories_for(data)
        index = self.problem_index()
        train = [t for t in train if index.shared(t) is None]
        write_jsonl(d / "sft_train.jsonl", train)
        path = sft_train(SFTRunConfig(
            wandb=WandbConfig(enabled=False), output_dir=str(d / "sft"), model=ModelConfig(name_or_path=model),
            data=data, style=c.verifier_style, max_steps=c.verifier_sft_steps, per_device_train_batch_size=c.sft_batch,
            learning_rate=c.verifier_sft_lr, warmup_steps=min(5, c.verifier_sft_steps), max_length=512,
            logging_steps=25, seed=c.seed, gradient_accumulation_steps=1, bf16=False, save_steps=0), train)
        return {"verifier": str(path), "records": len(train)}

    def problem_index(self) -> Any:
        """Every problem of the loop's sets (held-out, SFT, rounds): verifier data must stay off them."""
        index = ProblemIndex()
        for ps in self.sets().values():
            for p in ps:
                index.add(p.id, p.id, p.problem)
        return index

    # ------------------------------------------------------------------ (f)+(g) the prover, and held-out
    def prover_run_config(self, name: str, d: Path, init: str, problems: Path, ep: Any, reward: str = "verifier",
                          steps: int | None = None) -> Any:
        """Prover GRPO from ``init`` on ``problems`` with the verifier at ``ep`` (or the exact checker) as reward."""

        c = self.cfg
        audit = AuditConfig(every=c.audit_every if reward == "verifier" else 0, judge="exact", action="warn",
                            seed=c.seed)
        prover = ProverRLConfig(enabled=True, reward=reward, policy=c.reward_policy, problems=str(problems),
                                eval_problems=str(self.problems_file("held-out")), verifier=ep,
                                judge=self.judge(c.reward_passes), eval_passes=c.eval_passes,
                                eval_proofs_per_problem=c.eval_proofs, audit=audit)
        return GRPORunConfig(
            experiment_name=name, output_dir=str(d), train=True, init_from=init, model=ModelConfig(name_or_path=init),
            data=DataConfig(source="synthetic", n_train=None, n_eval=None, seed=c.seed),
            grpo=GRPOSettings(max_steps=steps or c.grpo_steps, per_device_train_batch_size=c.grpo_batch,
                              num_generations=c.num_generations, max_completion_length=c.max_completion_length,
                              learning_rate=c.grpo_lr, temperature=c.temperature, save_steps=10_000, beta=0.0,
                              gradient_accumulation_steps=1, warmup_steps=0, bf16=False, logging_steps=1,
                              seed=c.seed, log_completions=False),
            eval=EvalConfig(enabled=False), wandb=WandbSettings(enabled=False), prover=prover)

    def prover_stage(self, d: Path, r: int, init: str, verifier: str, reward: str = "verifier",
                     steps: int | None = None, problems: Path | None = None) -> dict[str, Any]:
        """(f) serve the round's verifier, (g) prover GRPO against it, then the held-out ProverBench of the new
        prover (its proofs judged by that verifier, ``eval_passes`` pessimistic passes)."""
        self.keep(verifier)
        ep = self.endpoint("verifier", verifier)
        rc = self.prover_run_config(f"prover_round{r}" if reward == "verifier" else "gold", d, init,
                                    problems or self.problems_file(f"round {r}"), ep, reward, steps)
        grpo_run(rc)
        prover = str(d / "final")
        audit = {}
        s = d / "train_summary.json"
        if s.is_file():
            audit = (json.loads(s.read_text()).get("train", {}).get("prover_reward") or {}).get("audit") or {}
        doc = self.evaluate(d, rc.prover, prover, verifier, f"round {r}" if reward == "verifier" else "gold")
        exploit = audit.get("audit_exploits", 0) / audit["audit_checked"] if audit.get("audit_checked") else None
        return {"prover": prover, "verifier": verifier, "audit": audit, "exploit_rate": exploit,
                "heldout_dir": str(d / "heldout"), "acceptance": (doc.get("acceptance") or {}).get("overall")}

    def evaluate(self, d: Path, prover_cfg: Any, prover: str, verifier: str, label: str) -> dict[str, Any]:
        c = self.cfg
        ev = EvalConfig(engine="endpoint", endpoint=self.endpoint("prover", prover),
                        judge=dataclasses.replace(heldout_judge(), max_tokens=c.max_completion_length,
                                                  temperature=c.eval_temperature, run_seed=c.seed),
                        bootstrap=BootstrapSpec(n=200, seed=c.seed), progress=c.progress)
        return evaluate_prover(prover_cfg, ev, d, self.sets()["held-out"], prover, label)

    def heldout(self, d: Path, r: int, prover_dir: Path, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Held-out figures of round r from the prover stage's ProverBench files: the prover's true accuracy,
        acceptance and hacking rate (exact checker), and the verifier's Rough / Meta Balanced F1 and false-acceptance
        rate on the prover's proofs (the 8-pass pessimistic decision; meta grades by the rule against the checker's
        annotation)."""
        doc = score_heldout(prover_dir / "heldout", self.cfg.bootstrap_n, self.cfg.seed)
        doc = {"round": r, **doc, **(extra or {})}
        (d.parent / "heldout.json").write_text(json.dumps(doc, indent=1, default=str))
        self.log_round(r, doc)
        return {k: v for k, v in doc.items() if k != "per_proof"}

    def log_round(self, r: int, doc: Mapping[str, Any]) -> None:
        """One W&B run per round (offline without a key), in the loop's group."""
        if not self.cfg.wandb.enabled:
            return
        wb = dataclasses.replace(self.cfg.wandb, name=self.cfg.wandb.name or f"{self.out.name}/round_{r}")
        run = init_run(wb, {**dataclasses.asdict(self.cfg), "round": r}, self.out / f"round_{r}", job_type="loop_round",
                       group=self.cfg.wandb.group or self.out.name)
        try:
            flat = {f"heldout/{k}": float(v) for k, v in doc.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)}
            run.log(flat)
            run.summary.update(flat)
        finally:
            run.finish()

    # ------------------------------------------------------------------ rounds r >= 1
    def proofs(self, d: Path, r: int, prover: str) -> dict[str, Any]:
        """(a) the current prover writes ``k`` proofs per problem of the round (no revision)."""
        c = self.cfg
        ep = self.endpoint("prover", prover)
        return cand.run(cand.CandidatesConfig(
            problems=str(self.problems_file(f"round {r}")), out=str(d), generators=[ep], k=c.k, rounds=0,
            temperature=c.temperature, max_tokens=c.max_completion_length, run_seed=c.seed + r, progress=c.progress))

    def selection(self, d: Path, r: int, verifier: str) -> dict[str, Any]:
        """(b) verifier-uncertainty selection of ``budget`` proofs with the current verifier."""
        c = self.cfg
        df = select_run(SelectConfig(trajectories=str(self.out / f"round_{r}" / "proofs" / "candidates.jsonl"),
                                     out=str(d), endpoint=self.endpoint("verifier", verifier),
                                     judge=self.judge(c.select_passes), budget=c.budget,
                                     per_problem_cap=c.per_problem_cap, seed=c.seed + r, progress=c.progress))
        return {"queue": str(d / "annotation_queue.jsonl"), "selected": int((df["status"] == "selected").sum())
                if "status" in df else None}

    def annotate(self, d: Path, r: int, verifier: str, queue: Path) -> dict[str, Any]:
        """(c) the queue annotated: simulated expert (Label Studio export -> ingest), a human export, or autolabel."""
        c = self.cfg
        if not queue.is_file() or not queue.read_text().strip():
            write_jsonl(d / "labelled.jsonl", [])
            return {"records": None, "labelled": 0, "note": "empty queue"}
        if c.annotator == "autolabel":
            ep = self.endpoint("verifier", verifier)
            s = autolabel(AutolabelConfig(
                trajectories=str(queue), out=str(d), endpoint=ep,
                judge=dataclasses.replace(self.judge(c.autolabel_n), temperature=max(c.judge_temperature, 0.5)),
                meta=MetaVerifierConfig(kind="llm", endpoint=ep, temperature=1.0, template="meta_verify_analysis",
                                        max_tokens=c.verifier_max_tokens, run_seed=c.seed + r),
                n=c.autolabel_n, m=c.autolabel_m, k=c.autolabel_k, truth="synthetic", progress=c.progress))
            return {"records": str(d / "labelled.jsonl"), "labelled": _count(d / "labelled.jsonl"),
                    "undecided": _count(d / "undecided.jsonl"), "summary": s}
        export(AnnotateConfig(queue=str(queue), out=str(d / "tasks"), progress=False))
        if c.annotator == "simulated_expert":
            s = simulate(SimulatedExpertConfig(tasks=str(d / "tasks" / "tasks.json"), out=str(d / "expert"),
                                               budget=c.budget))
            source = d / "expert" / "export.json"
        else:  # a human export of this round's queue
            s = {}
            source = Path(c.annotator[len("export:"):].replace("{round}", str(r)))
            if not source.is_file():
                raise InputError(f"annotator={c.annotator}: {source} does not exist; annotate the tasks in "
                                 f"{d / 'tasks' / 'tasks.json'} (Label Studio) and put the export there, then run "
                                 "the same command again (the loop resumes here)")
        res = ingest(IngestConfig(input=str(source), out=str(d / "ingested"), progress=False,
                                  name=f"round {r} annotations"))
        return {"records": str(d / "ingested"), "labelled": res.summary().get("kept"), "expert": s,
                "ingested": res.summary()}

    def augment(self, d: Path, r: int, prover: str, verifier: str, records: str | None) -> dict[str, Any]:
        """(d) repair augmentation: the prover repairs each invalid annotated proof from its correction."""
        c = self.cfg
        if not records:
            (d / "positives.jsonl").write_text("")
            return {"positives_total": 0, "note": "nothing annotated"}
        verifiers = [self.endpoint("verifier", verifier)] if c.repair_check == "verifiers" else []
        s = augment_run(AugmentConfig(input=records, out=str(d), generator=self.endpoint("prover", prover),
                                      verifiers=verifiers, check=c.repair_check, attempts=c.repair_attempts,
                                      temperature=c.temperature, max_tokens=c.max_completion_length,
                                      verify=self.judge(8, early_stop=True), run_seed=c.seed + r,
                                      progress=c.progress))
        if not (d / "positives.jsonl").is_file():
            (d / "positives.jsonl").write_text("")
        return s

    def retrain(self, d: Path, r: int, verifier: str) -> dict[str, Any]:
        """(e) the verifier retrained on the grown data: planted errors + every round's annotations and repairs so
        far (``data_pipeline.grpo_dataset``; no held-out problem), SFT refresh, then Meta-Ver-RL GRPO."""
        c = self.cfg
        data = d / "data"
        data.mkdir(parents=True, exist_ok=True)
        index = self.problem_index()
        pool = generate_synthetic(c.n_base * 4, seed=c.seed + 5, **{**task(c), "problem_id_from_text": True,
                                  "fatal_kinds": ["wrong_operand", "wrong_final"], "error_delta_min": 10,
                                  "error_delta_max": 20})
        base = [t for t in pool if index.shared(t) is None][: c.n_base]
        if len(base) < c.n_base:  # counted in result.json's data.by_origin too
            self.log(f"round {r} verifier: only {len(base)} of n_base={c.n_base} planted-error records lie on "
                     "problems outside the loop's sets (the task has few distinct problems: raise max_operand or "
                     "lower n_base)")
        write_jsonl(data / "base.jsonl", base)
        extra, positives = [], []
        for k in range(1, r + 1):
            res = json.loads((self.out / f"round_{k}" / "annotate" / "result.json").read_text())
            if res.get("records"):
                extra += [t for t in load_any(res["records"]).records
                          if t.annotation is not None and not t.annotation.report_error_case]
            pos = self.out / f"round_{k}" / "augment" / "positives.jsonl"
            if pos.is_file() and pos.read_text().strip():
                positives += load_trajectories(pos).records
        write_jsonl(data / "extra.jsonl", extra)
        write_jsonl(data / "positives.jsonl", positives)
        held = [ProofTrajectory(p.id, p.id, p.problem, tuple(gold_proof(p.problem)) or ("",))
                for p in self.sets()["held-out"]]
        write_jsonl(data / "held_out_problems.jsonl", held)
        variant = "pos_aug" if extra and positives else "extra_ann" if extra else "base"
        counts = write_variant(GrpoDataConfig(variant=variant, base=str(data / "base.jsonl"),
                                              extra=str(data / "extra.jsonl"),
                                              augmented=str(data / "positives.jsonl"),
                                              held_out=str(data / "held_out_problems.jsonl"), out=str(data / variant),
                                              seed=c.seed + r))
        train_path = data / variant / "trajectories.jsonl"
        if c.annotation_weight > 1 and extra:
            weighted = weight_records(load_trajectories(train_path).records, {t.id for t in extra}, c.annotation_weight)
            train_path = data / variant / "weighted.jsonl"
            write_jsonl(train_path, weighted)
            counts = {**counts, "rows": len(weighted), "annotation_weight": c.annotation_weight}
        model = verifier
        if c.refresh_sft_steps:
            model = self.refresh(d, load_trajectories(train_path).records, verifier)
        if c.verifier_grpo_steps:
            model = self.verifier_grpo(d, r, model, train_path, variant)
        return {"verifier": model, "variant": variant, "data": counts, "extra": len(extra),
                "positives": len(positives)}

    def check(self, d: Path, r: int, previous: str, verifier: str, records: str | None) -> dict[str, Any]:
        """Before the prover trains against it: how the round's new verifier, beside the one before it, decides the
        round's proofs of stage (a) under the prover's reward judge (``reward_passes`` pessimistic passes); rates
        (``decision_rates``) on the annotated proofs by their annotation (what a user has; they are in the new
        verifier's training data) and on every proof by the exact checker where the task is synthetic. Training
        problems only: no held-out proof is judged here."""
        c = self.cfg
        trajs = load_trajectories(self.out / f"round_{r}" / "proofs" / "candidates.jsonl").records
        annotated: dict[str, bool] = {}
        if records:
            annotated = {t.id: t.annotation.is_valid for t in load_any(records).records if t.annotation is not None}
        truth = [exact_truth(t) for t in trajs]
        out: dict[str, Any] = {"proofs": len(trajs), "annotated": len(annotated)}
        for name, model in (("new", verifier), ("previous", previous)):
            res = judge_records(trajs, OpenAIEngine(self.endpoint("verifier", model)), self.judge(c.reward_passes),
                                d / f"judgments_{name}.jsonl", progress=c.progress)
            judged = res.judged()  # resumed and new; a proof whose judging failed is absent (counted)
            keep = [i for i, t in enumerate(trajs) if t.id in judged]
            js = [judged[trajs[i].id] for i in keep]
            out[name] = {"model": model, "not_judged": len(trajs) - len(keep),
                         "annotation": decision_rates(js, [annotated.get(trajs[i].id) for i in keep]),
                         "exact": decision_rates(js, [truth[i] for i in keep])}
        n, p = out["new"]["exact"], out["previous"]["exact"]
        if n["true"] and n["false"]:
            self.log(f"round {r} check (reward judge, exact truth, round {r} proofs): new verifier TPR "
                     f"{_pct(n['tpr'])} TNR {_pct(n['tnr'])} (per pass {_pct(n['pass_tpr'])}/{_pct(n['pass_tnr'])}); "
                     f"previous TPR {_pct(p['tpr'])} TNR {_pct(p['tnr'])}")
        return out

    def refresh(self, d: Path, trajs: Sequence[Any], verifier: str) -> str:
        """SFT refresh of the current verifier on the grown data: planted records with the warm start's gold texts,
        annotated proofs with a one-sentence target naming the first fatal step (``training.sft.gold_text``)."""
        from datasets import Dataset  # lazy: datasets takes seconds to import; only SFT tables need it

        c = self.cfg
        rows = [{"prompt": as_messages(verification_prompt(t, with_reference=False, template=c.verifier_template)),
                 "completion": [{"role": "assistant", "content": gold_text(
                     t, c.verifier_style if (t.meta or {}).get("synthetic") is not None else "minimal")}]}
                for t in trajs]
        path = sft_train(SFTRunConfig(
            wandb=WandbConfig(enabled=False), output_dir=str(d / "sft"), model=ModelConfig(name_or_path=verifier),
            data=DataConfig(source="jsonl", prompt_template=c.verifier_template), style=c.verifier_style,
            max_steps=c.refresh_sft_steps, per_device_train_batch_size=c.sft_batch, learning_rate=c.verifier_sft_lr,
            warmup_steps=0, max_length=512, logging_steps=10, seed=c.seed, gradient_accumulation_steps=1, bf16=False,
            save_steps=0, lr_scheduler_type="constant"), [], dataset=Dataset.from_list(rows))
        return str(path)

    def verifier_grpo(self, d: Path, r: int, init: str, train_path: Path, variant: str) -> str:
        c = self.cfg
        grpo_run(GRPORunConfig(
            experiment_name=f"verifier_round{r}", output_dir=str(d / "grpo"), train=True, init_from=init,
            model=ModelConfig(name_or_path=init),
            data=DataConfig(source="jsonl", train_path=str(train_path), variant=variant,
                            prompt_template=c.verifier_template),
            reward=RewardConfig(components={"meta": 1.0}),
            grpo=GRPOSettings(max_steps=c.verifier_grpo_steps, per_device_train_batch_size=c.grpo_batch,
                              num_generations=c.num_generations, max_completion_length=c.verifier_max_tokens,
                              learning_rate=c.verifier_grpo_lr, temperature=c.judge_temperature, save_steps=10_000,
                              beta=0.0, gradient_accumulation_steps=1, warmup_steps=0, bf16=False, logging_steps=1,
                              seed=c.seed + r, log_completions=False, skip_zero_grad_steps=True),
            eval=EvalConfig(enabled=False), wandb=WandbSettings(enabled=False)))
        return str(d / "grpo" / "final")

    # ------------------------------------------------------------------ the whole loop
    def share(self) -> None:
        """``share_round0``: link this loop's round 0 to another loop's finished one (its settings are checked)."""
        c = self.cfg
        mine = self.out / "round_0"
        if not c.share_round0 or mine.exists():
            return
        theirs = Path(c.share_round0).resolve() / "round_0"
        missing = [s for s in ROUND0_STAGES if not (theirs / s / "loop_done.json").is_file()]
        if missing:
            raise InputError(f"loop config, field 'share_round0': {theirs} has not finished round 0 "
                             f"({', '.join(missing)} missing): run that loop first")
        self.out.mkdir(parents=True, exist_ok=True)
        os.symlink(theirs, mine, target_is_directory=True)
        self.log(f"round 0: shared with {theirs}")

    def round0(self) -> dict[str, Any]:
        self.share()
        p = self.stage(0, "prover_sft", self.prover_sft)
        v = self.stage(0, "verifier", lambda d: self.verifier_warm_start(d, p["model"]))
        g = self.stage(0, "prover", lambda d: self.prover_stage(d, 0, p["prover"], v["verifier"]))
        self.stage(0, "heldout", lambda d: self.heldout(d, 0, d.parent / "prover",
                                                        {"exploit_rate": g.get("exploit_rate")}))
        return {"prover": g["prover"], "verifier": v["verifier"], "model": p["model"], "prover_sft": p["prover"]}

    def one_round(self, r: int, prover: str, verifier: str, sft_prover: str) -> dict[str, Any]:
        """Round r >= 1: (a) proofs of the current ``prover`` ... (g) prover GRPO against the new verifier, from
        ``prover`` or, with ``prover_from=sft``, from round 0's ``sft_prover``; then the held-out figures."""
        rd = self.out / f"round_{r}"
        start = sft_prover if self.cfg.prover_from == "sft" else prover
        self.stage(r, "proofs", lambda d: self.proofs(d, r, prover))
        sel = self.stage(r, "selection", lambda d: self.selection(d, r, verifier))
        ann = self.stage(r, "annotate", lambda d: self.annotate(d, r, verifier, Path(sel["queue"])))
        self.stage(r, "augment", lambda d: self.augment(d, r, prover, verifier, ann.get("records")))
        v = self.stage(r, "verifier", lambda d: self.retrain(d, r, verifier))
        chk = self.stage(r, "check", lambda d: self.check(d, r, verifier, v["verifier"], ann.get("records")))
        g = self.stage(r, "prover", lambda d: self.prover_stage(d, r, start, v["verifier"]))
        ex = chk["new"]["exact"]
        self.stage(r, "heldout", lambda d: self.heldout(d, r, rd / "prover", {
            "exploit_rate": g.get("exploit_rate"), "annotated": ann.get("labelled"), "variant": v.get("variant"),
            "verifier_data_rows": (v.get("data") or {}).get("rows"), "positives": v.get("positives"),
            "check_tpr": ex["tpr"], "check_tnr": ex["tnr"], "check_pass_tpr": ex["pass_tpr"],
            "check_pass_tnr": ex["pass_tnr"], "check_previous_tpr": chk["previous"]["exact"]["tpr"],
            "check_previous_tnr": chk["previous"]["exact"]["tnr"]}))
        return {"prover": g["prover"], "verifier": v["verifier"]}

    def check_markers(self) -> None:
        """Before any work: every finished stage in OUT must have this run's settings (a changed option is one
        error naming it at once, not when the loop reaches that stage)."""
        for marker in sorted(self.out.glob("round_*/*/loop_done.json")):
            r = int(marker.parent.parent.name.removeprefix("round_"))
            done_stage(marker, self.round0_settings if r == 0 else self.round_settings, self.cfg.resume)

    def run(self) -> dict[str, Any]:
        """Round 0, rounds 1..R, then the report; returns the report document."""
        self.check_markers()
        self.out.mkdir(parents=True, exist_ok=True)
        self.log(f"{self.out}: {self.cfg.rounds} rounds, annotator {self.cfg.annotator}; problems: "
                 + ", ".join(f"{k} {len(v)}" for k, v in self.sets().items()))
        try:
            cur = self.round0()
            sft = cur["prover_sft"]
            for r in range(1, self.cfg.rounds + 1):
                cur = self.one_round(r, cur["prover"], cur["verifier"], sft)
        finally:
            self.stop_servers()
        return write_report(self.out, self.cfg.rounds, self.cfg.bootstrap_n, self.cfg.seed)

    def gold_control(self, steps: int | None = None) -> dict[str, Any]:
        """The positive control (``OUT/gold/``): prover GRPO from round 0's SFT prover with the exact checker as the
        reward, ``steps`` steps (default: the final prover's GRPO steps: every round's, or one round's with
        ``prover_from=sft``) on the problems of every round; held-out as a round (acceptance by the first verifier).
        Needs round 0."""
        c = self.cfg
        steps = steps or gold_steps(c)
        settings = {**self.round0_settings, "gold_steps": steps, "rounds": c.rounds}
        d = self.out / "gold"
        marker = d / "loop_done.json"
        if done_stage(marker, settings, c.resume):
            self.log("gold: resumed (finished with these settings)")
            return json.loads((d / "heldout.json").read_text())
        r0 = self.round0()
        d.mkdir(parents=True, exist_ok=True)
        problems = [p for r in range(c.rounds + 1) for p in self.sets()[f"round {r}"]]
        write_jsonl(d / "problems.jsonl", [dataclasses.asdict(p) for p in problems])
        self.log(f"gold: prover GRPO with the exact checker as reward, {steps} steps")
        try:
            self.prover_stage(d, 0, r0["prover_sft"], r0["verifier"], reward="gold", steps=steps,
                              problems=d / "problems.jsonl")
        finally:
            self.stop_servers()
        doc = {"arm": "gold", **score_heldout(d / "heldout", c.bootstrap_n, c.seed)}
        (d / "heldout.json").write_text(json.dumps(doc, indent=1, default=str))
        mark_done(marker, settings)
        return doc

    def sft_control(self) -> dict[str, Any]:
        """The start of every prover (``OUT/sft/``): round 0's SFT prover on the held-out problems, its proofs judged
        by the first verifier, as a round is. A loop whose prover ends below it taught the prover nothing, whatever
        its gain over round 0. Needs round 0."""
        c = self.cfg
        d = self.out / "sft"
        marker = d / "loop_done.json"
        if done_stage(marker, self.round0_settings, c.resume):
            self.log("sft: resumed (finished with these settings)")
            return json.loads((d / "heldout.json").read_text())
        r0 = self.round0()
        d.mkdir(parents=True, exist_ok=True)
        self.log("sft: the SFT prover on the held-out problems")
        try:
            self.keep(r0["verifier"])
            rc = self.prover_run_config("sft", d, r0["prover_sft"], self.problems_file("held-out"),
                                        self.endpoint("verifier", r0["verifier"]))
            self.evaluate(d, rc.prover, r0["prover_sft"], r0["verifier"], "sft")
        finally:
            self.stop_servers()
        doc = {"arm": "sft", **score_heldout(d / "heldout", c.bootstrap_n, c.seed)}
        (d / "heldout.json").write_text(json.dumps(doc, indent=1, default=str))
        mark_done(marker, self.round0_settings)
        return doc


# ---------------------------------------------------------------------- held-out scoring and the report
def _count(path: Path) -> int:
    return sum(1 for line in open(path, encoding="utf-8") if line.strip()) if path.is_file() else 0


def score_heldout(pb_dir: Path, bootstrap_n: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Held-out figures of one ProverBench run on synthetic problems (``pb_dir``: proofs.jsonl, judgments.jsonl):
    the prover's true accuracy, acceptance and hacking rate with ``per_proof`` ("problem/sample" -> [true,
    accepted]) for paired comparisons, and the verifier's Rough / Meta TPR, TNR, Balanced F1 and false-acceptance
    rate on the prover's first versions (labels: the exact checker's appendix-C annotation)."""
    g = gold_table(pb_dir, 1, "all")["round0"]
    proofs = [t for t in load_trajectories(pb_dir / "proofs.jsonl").records if int(t.meta.get("round", 0)) == 0]
    gold = recipes.label_held_out(proofs)
    judged = {j.id: j for j in load_judgments(pb_dir / "judgments.jsonl")}
    gold = [t for t in gold if t.id in judged]
    rule = RuleMetaVerifier()
    preds = {}
    for t in gold:
        j = judged[t.id]
        grade = None
        if j.passes:
            i = representative_pass(j.passes, j.verdict, j.first_error_step)
            grade = rule.grade(t, j.passes[i]).grade
        preds[t.id] = Prediction(t.id, j.verdict, j.first_error_step, grade, has_meta=True)
    out: dict[str, Any] = {"n": g["n"], "true_acc": g["true_acc"], "accept": g["accept"],
                           "hacking_rate": g["hacking_rate"], "verifier_n": len(gold)}
    if gold:
        m = score_predictions(gold, preds, ScoreOptions(bootstrap=BootstrapSpec(n=bootstrap_n, seed=seed)))["metrics"]
        for key, name in (("rough.balanced_f1", "verifier_rough_bf1"), ("meta.balanced_f1", "verifier_meta_bf1"),
                          ("rough.tpr", "verifier_rough_tpr"), ("rough.tnr", "verifier_rough_tnr"),
                          ("meta.tpr", "verifier_meta_tpr"), ("meta.tnr", "verifier_meta_tnr")):
            v = m.get(key) or {}
            out[name] = v.get("value")
            out[f"{name}_ci"] = v.get("ci")
        false = [t for t in gold if not t.annotation.is_valid]
        out["verifier_false"] = len(false)
        out["verifier_false_accept"] = (sum(judged[t.id].verdict is Verdict.VALID for t in false) / len(false)
                                        if false else None)
    else:
        out.update({k: None for k in ("verifier_rough_bf1", "verifier_meta_bf1", "verifier_false_accept")})
    out["per_proof"] = g["per_proof"]
    return out


def paired_gain(after: Mapping[str, Sequence[int]], before: Mapping[str, Sequence[int]], index: int = 0,
                bootstrap_n: int = 1000, seed: int = 0) -> dict[str, Any]:
    """``after - before`` of a per-proof value (0: true, 1: accepted) on the same held-out proofs, with the paired
    bootstrap CI clustered by problem (``eval.stats.mean_delta_ci``)."""

    keys = sorted(set(after) & set(before))
    if not keys:
        return {"n": 0, "delta": None, "ci": [None, None]}
    d, lo, hi = mean_delta_ci([after[k][index] for k in keys], [before[k][index] for k in keys],
                              [k.rsplit("/", 1)[0] for k in keys], BootstrapSpec(n=bootstrap_n, seed=seed))
    return {"n": len(keys), "problems": len({k.rsplit("/", 1)[0] for k in keys}), "delta": d, "ci": [lo, hi]}


def _pct(v: Any) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def write_report(out: Path, rounds: int, bootstrap_n: int = 1000, seed: int = 0) -> dict[str, Any]:
    """``OUT/report.md`` (one row per round), ``OUT/report.json`` and ``OUT/loop.png`` from the rounds' heldout.json."""
    docs = [json.loads((out / f"round_{r}" / "heldout.json").read_text()) for r in range(rounds + 1)
            if (out / f"round_{r}" / "heldout.json").is_file()]
    if not docs:
        raise InputError(f"{out}: no round has finished (no round_*/heldout.json)")
    r0, final = docs[0], docs[-1]
    gain = paired_gain(final["per_proof"], r0["per_proof"], 0, bootstrap_n, seed)
    accept_gain = paired_gain(final["per_proof"], r0["per_proof"], 1, bootstrap_n, seed)
    controls = {arm: json.loads((out / arm / "heldout.json").read_text()) for arm in ("sft", "gold")
                if (out / arm / "heldout.json").is_file()}
    rows = [[d["round"], d.get("annotated", "-") if d["round"] else "-", d.get("verifier_data_rows") or "-",
             _pct(d["true_acc"]), _pct(d["accept"]), _pct(d["hacking_rate"]), _pct(d.get("exploit_rate")),
             _pct(d.get("verifier_rough_bf1")), _pct(d.get("verifier_meta_bf1")),
             _pct(d.get("verifier_false_accept")), _pct(d.get("check_tpr")), _pct(d.get("check_tnr"))] for d in docs]
    rows += [[f"{arm} (control)", "-", "-", _pct(d["true_acc"]), _pct(d["accept"]), _pct(d["hacking_rate"]), "-",
              _pct(d.get("verifier_rough_bf1")), _pct(d.get("verifier_meta_bf1")),
              _pct(d.get("verifier_false_accept")), "-", "-"] for arm, d in controls.items()]
    vs = {f"{arm}_gain": paired_gain(final["per_proof"], d["per_proof"], 0, bootstrap_n, seed)
          for arm, d in controls.items()}
    # the positive control's own gain: gold-reward GRPO over the SFT prover it starts from
    control = paired_gain(controls["gold"]["per_proof"], controls["sft"]["per_proof"], 0, bootstrap_n, seed) \
        if len(controls) == 2 else {"n": 0}
    ci = gain["ci"]
    lines = [f"# The prover-verifier loop: {out.name}", "",
             f"Held-out: {r0['n']} prover proofs per round (problems in no training set), judged by that round's "
             "verifier with pessimistic passes; true = the exact checker; hacking = accepted but false (share of all "
             "proofs); exploit = the hack audit's share of reward-accepted proofs the checker rejects during the "
             "round's prover GRPO; the verifier's Balanced F1 and false acceptance are on the same proofs.", "",
             "Check TPR / TNR: before the prover trains, the round's new verifier on the round's own proofs "
             "(training problems, the reward's judge, exact truth). Controls: the SFT prover every prover starts "
             "from, and prover GRPO with the exact checker as reward, each judged by the first verifier.", "",
             *md_table(["round", "annotated", "verifier data", "true %", "accepted %", "hacking %", "exploit %",
                        "Rough BF1", "Meta BF1", "false accepted %", "check TPR %", "check TNR %"], rows), "",
             (f"True accuracy, last round - round 0: {_pct(gain['delta'])} points "
              f"(95% CI [{_pct(ci[0])}, {_pct(ci[1])}], paired on {gain['n']} proofs, clustered by problem); "
              f"acceptance: {_pct(accept_gain['delta'])} points.") if gain["n"] else "No paired proofs.",
             *[f"True accuracy, last round - {k[:-5]} control: {_pct(g['delta'])} points (95% CI "
               f"[{_pct(g['ci'][0])}, {_pct(g['ci'][1])}], paired on {g['n']} proofs)." for k, g in vs.items()
               if g["n"]],
             *([f"Positive control, gold - SFT prover: {_pct(control['delta'])} points (95% CI "
                f"[{_pct(control['ci'][0])}, {_pct(control['ci'][1])}], paired on {control['n']} proofs)."]
               if control["n"] else []), ""]
    write_markdown(out, lines)
    report = {"rounds": [{k: v for k, v in d.items() if k != "per_proof"} for d in docs],
              "true_gain": gain, "accept_gain": accept_gain, **vs, **({"control_gain": control} if control["n"] else {}),
              "controls": {a: {k: v for k, v in d.items() if k != "per_proof"} for a, d in controls.items()}}
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    fig, _ = figure((9.0, 3.4))
    fig.clf()
    a1, a2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    xs = [d["round"] for d in docs]
    for key, lab in (("true_acc", "true"), ("accept", "accepted"), ("hacking_rate", "hacking")):
        a1.plot(xs, [100 * (d.get(key) or 0) for d in docs], "o-", label=lab)
    for (arm, d), style in zip(controls.items(), (":", "--"), strict=False):
        a1.axhline(100 * (d.get("true_acc") or 0), color="grey", ls=style, lw=1, label=f"true, {arm} control")
    a1.set_xlabel("round")
    a1.set_ylabel("prover, held-out %")
    a1.legend(fontsize=7)
    for key, lab in (("verifier_rough_bf1", "Rough BF1"), ("verifier_meta_bf1", "Meta BF1"),
                     ("verifier_false_accept", "false accepted")):
        a2.plot(xs, [100 * (d.get(key) or 0) for d in docs], "o-", label=lab)
    a2.set_xlabel("round")
    a2.set_ylabel("verifier on the prover's proofs %")
    a2.legend(fontsize=7)
    save_figure(fig, out / "loop.png")
    return report


def run(cfg: LoopConfig, serve: Serve | None = None) -> dict[str, Any]:
    """The loop (``Loop.run``); ``serve``: how a model folder is served (default: vLLM, one server per model)."""
    return Loop(cfg, serve).run()


def main() -> None:
    """Hydra app: ``python -m training.loop out=DIR rounds=R annotator=...``."""
    @hydra_main("loop", LoopConfig)
    def _run(cfg: LoopConfig) -> None:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        report = run(cfg)
        g = report["true_gain"]
        print(f"wrote {Path(cfg.out) / 'report.md'}, {Path(cfg.out) / 'loop.png'}; true accuracy gain over round 0: "
              f"{g['delta']}")

    _run()


if __name__ == "__main__":
    main()
