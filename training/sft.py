"""SFT warm start on gold verification texts before GRPO (TRL ``SFTTrainer``).

``python training/sft.py output_dir=DIR [data.n_train=2000] [max_steps=300] [style=short]`` (tiny model, CPU);
``python training/sft.py sft_profile=cluster model=qwen3_8b data.train_path=... output_dir=DIR`` (GPU).

Rows are conversational prompt-completion pairs: the verification prompt of section 4.3
(``verifier/prompts/verify.j2``) and a gold verification whose answer block the one parser
reads (``data_pipeline.synthetic.gold_verification`` for the synthetic task; for expert-annotated
data, ``verifier.parser.format_verification`` over the reviewer comment). The loss is on the
completion only. The result (``DIR/final``) is the ``init_from`` of a GRPO run; ``DIR/verifier_card.json``
(``verifier.card``) says how to judge with it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from data_pipeline.synthetic import gold_verification
from data_pipeline.synthetic_check import Check, check_proof
from training.config import DataConfig, ModelConfig
from training.data import load_trajectories_for
from training.model import load_model
from training.scale import data_toy_values, raise_on_toy_values
from training.tracking import start_run, wandb_mode
from verifier.card import VerifierCard, write_card
from verifier.config import Sampling, hydra_main, redact
from verifier.errors import InputError
from verifier.meta_verifier import RuleMetaVerifier
from verifier.parser import format_meta_verification, format_verification
from verifier.records import NO_STEP, Annotation, MetaGrade, ProofTrajectory, Verdict, VerificationOutput
from verifier.results import WandbConfig, ladder_wandb
from verifier.templates import as_messages, meta_verification_prompt, verification_prompt

log = logging.getLogger("training.sft")


@dataclass
class SFTRunConfig:
    """SFT warm start (``configs/sft.yaml``). Defaults are real-model values
    (``configs/sft_profile/cluster.yaml``); the tiny CPU sizes are ``configs/sft_profile/cpu_tiny.yaml``."""

    output_dir: str = "runs/sft"
    smoke: bool = False  # a deliberate smoke run of a real model at toy sizes: the scale check only warns
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    style: str = "short"  # gold texts: minimal (one sentence) | short (reviewer comment) | stepwise (synthetic)
    max_steps: int = 1000
    num_train_epochs: float = 1.0
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 8
    learning_rate: float = 1e-5
    lr_scheduler_type: str = "cosine"
    warmup_steps: int = 20
    weight_decay: float = 0.0
    max_length: int | None = 16384  # prompt (the proof) + gold verification, in tokens
    logging_steps: int = 10
    save_steps: int = 200  # 0: only the final model
    save_total_limit: int | None = 2
    seed: int = 0
    bf16: bool | None = None  # None: TRL's default (bf16 unless fp16); profile cpu_tiny sets false
    wandb: WandbConfig = field(default_factory=ladder_wandb)  # the ladder's project; group: the ladder's folder
    extra: dict[str, Any] = field(default_factory=dict)  # any other trl.SFTConfig field


TOY_SFT_MAX_LENGTH = 1024  # a sequence budget at or below this is a tiny-profile value
TOY_SFT_LEARNING_RATE = 1e-3  # the tiny random model's rate; it wrecks a pretrained model


def toy_values(cfg: SFTRunConfig) -> list[str]:
    """Every key of an SFT run that carries a tiny-profile value, each with the reason."""
    bad = data_toy_values(cfg.data, need_eval_cap=False)
    if cfg.max_length is not None and cfg.max_length <= TOY_SFT_MAX_LENGTH:
        bad.append(f"max_length={cfg.max_length} (<= {TOY_SFT_MAX_LENGTH} tokens: proofs would be cut)")
    if cfg.learning_rate >= TOY_SFT_LEARNING_RATE:
        bad.append(f"learning_rate={cfg.learning_rate:g} (>= {TOY_SFT_LEARNING_RATE:g})")
    return bad


def check_scale(cfg: SFTRunConfig, model_path: str | None = None) -> None:
    """Stop a real-model SFT run that still has tiny-profile values, before loading anything."""
    raise_on_toy_values(model_path or cfg.model.name_or_path, toy_values(cfg), "sft_profile=cluster", smoke=cfg.smoke)


def gold_text(traj, style: str = "short") -> str:
    """The gold verification text of a trajectory.

    ``minimal``: one sentence naming the fatal step (any annotated record); ``short`` / ``stepwise``:
    the synthetic task's canonical rationale (``gold_verification``), or the reviewer comment.

    >>> from verifier.records import Annotation, ProofTrajectory
    >>> print(gold_text(ProofTrajectory("t", "p", "P", ("a", "b"), annotation=Annotation(first_fatal_error_step=1)), "minimal"))
    Step 1 is wrong.
    <BLANKLINE>
    <final_answer>
    verdict: invalid
    first_error_step: 1
    </final_answer>
    """
    if style == "minimal":
        ann = traj.annotation
        if ann is None:
            raise InputError(f"record {traj.id!r}, field 'annotation': SFT targets need an expert annotation")
        why = "All steps are correct." if ann.is_valid else (
            "A step is wrong." if ann.fatal_step_unknown else f"Step {ann.first_fatal_error_step} is wrong.")
        return format_verification(ann.polarity, ann.first_fatal_error_step, why)
    if (traj.meta or {}).get("synthetic") is not None:
        return gold_verification(traj, style)
    ann = traj.annotation
    if ann is None:
        raise InputError(f"record {traj.id!r}, field 'annotation': SFT targets need an expert annotation")
    rationale = ann.reviewer_comment or ("All steps are correct." if ann.is_valid else
                                         f"Step {ann.first_fatal_error_step} contains a fatal error.")
    return format_verification(ann.polarity, ann.first_fatal_error_step, rationale)


def sft_dataset(trajs: Sequence, style: str = "short", with_reference: bool = False, template: str = "verify"):
    """A ``datasets.Dataset`` of conversational prompt-completion rows."""
    # lazy: datasets takes seconds to import; only building the SFT table needs it
    from datasets import Dataset

    return Dataset.from_list([{
        "prompt": as_messages(verification_prompt(t, with_reference=with_reference, template=template)),
        "completion": [{"role": "assistant", "content": gold_text(t, style)}],
    } for t in trajs])


def meta_gold_text(analysis: VerificationOutput, truth: Check) -> tuple[MetaGrade, str]:
    """The gold meta-verification of one analysis of a synthetic-task proof (its grade by the rule
    meta-verifier against the exact checker's truth, section 3.3 / B.3, and a rationale that first checks the
    proof, then compares): what a model learns so that it can meta-verify its own analyses without an expert,
    as DeepSeekMath-V2's verifier does (``data_pipeline.autolabel``, ``meta.template=meta_verify_analysis``).

    >>> from verifier.parser import parse_verification as p, format_verification as f
    >>> from data_pipeline.synthetic_check import check_proof
    >>> c = check_proof("Compute 5 + 3 - 2.", ["5 + 3 = 9", "9 - 2 = 7", "So the answer is 7."])
    >>> g, text = meta_gold_text(p(f("invalid", 1, "Step 1 is wrong.")), c)
    >>> g.value, text
    ('BASIC_MATCH', 'The first error is step 0: 5 + 3 = 8, not 9. The model names step 1, one step off.')
    """
    ann = Annotation(first_fatal_error_step=truth.step if not truth.true else NO_STEP,
                     recoverable_error_steps=tuple(truth.recoverable), reviewer_comment=truth.reason,
                     fatal_step_unknown=not truth.true and truth.step < 0)
    grade = RuleMetaVerifier().grade(ProofTrajectory("m", "m", "", (), annotation=ann), analysis).grade
    first = "Every step is correct." if truth.true else f"The first error is {truth.reason}."
    named = analysis.first_error_step
    if not analysis.ok:
        why = "The model's answer has no verdict."
    elif analysis.verdict is Verdict.VALID:
        why = "The model accepts the proof, rightly." if truth.true else "The model accepts a proof with a fatal error."
    elif truth.true:
        why = f"The model rejects a correct proof at step {named}."
    elif named == truth.step:
        why = f"The model names step {named}, the first wrong step."
    elif named >= 0 and abs(named - truth.step) <= 1:
        why = f"The model names step {named}, one step off."
    else:
        why = f"The model names step {named}, not the first wrong step."
    return grade, f"{first} {why}"  # type: ignore[return-value]


def meta_sft_rows(pairs: Sequence[tuple[ProofTrajectory, VerificationOutput]],
                  template: str = "meta_verify_analysis") -> list[dict[str, Any]]:
    """Conversational SFT rows that teach meta-verification without an annotation: the prompt of ``template``
    over the proof and one analysis (as the labeller renders it), the completion ``meta_gold_text`` with its
    answer block; the proof's truth comes from the exact checker (``data_pipeline.synthetic_check``), so
    records of other problems are refused."""
    rows = []
    for t, out in pairs:
        truth = check_proof(t.problem, t.proof_steps)
        if truth.kind == "not_a_problem":
            raise InputError(f"record {t.id!r}, field 'problem': not a synthetic-task problem (no exact truth)")
        grade, why = meta_gold_text(out, truth)
        bare = dataclasses.replace(t, annotation=None)
        rows.append({"prompt": as_messages(meta_verification_prompt(bare, out, template=template)),
                     "completion": [{"role": "assistant", "content": format_meta_verification(grade, why)}]})
    return rows


def init_wandb(cfg: SFTRunConfig, out: Path):
    """The SFT run's W&B run on the main rank (``training.tracking.start_run``): the ladder's project and group
    (``wandb.group``, else WANDB_RUN_GROUP, else the folder of ``output_dir``), the redacted config; None when off."""
    return start_run(cfg.wandb, out, name=f"sft,{cfg.style}", tags=["sft"], config=cfg, job_type="sft",
                     is_main=int(os.environ.get("RANK", "0")) == 0)


def cpu_sft_config(output_dir: str | Path, model: str | Path, **kw: Any) -> SFTRunConfig:
    """An ``SFTRunConfig`` for a tiny model on CPU (the benches): fp32, no gradient accumulation, 5 warm-up steps,
    512 tokens, a log every 25 steps, no W&B run (the dataclass defaults are GPU values); ``kw``: the rest."""
    return SFTRunConfig(**{"wandb": WandbConfig(enabled=False), "output_dir": str(output_dir),
                           "model": ModelConfig(name_or_path=str(model)), "warmup_steps": 5, "max_length": 512,
                           "logging_steps": 25, "gradient_accumulation_steps": 1, "bf16": False, **kw})


def sft_train(cfg: SFTRunConfig, trajs: Sequence, model_path: str | None = None, dataset: Any = None) -> Path:
    """Fine-tune on the gold verifications of ``trajs`` (or on ``dataset``: prompt-completion rows, e.g. the
    prover's gold proofs, ``bench/bench_prover.py``); returns ``output_dir/final``."""
    # lazy: TRL takes seconds to import (torch, transformers); only a training run needs it
    from trl import SFTConfig, SFTTrainer

    check_scale(cfg, model_path)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    model, tokenizer, peft_config = load_model(cfg.model, model_path)
    ds = dataset if dataset is not None else sft_dataset(trajs, cfg.style, cfg.data.with_reference,
                                                         cfg.data.prompt_template)
    wb = init_wandb(cfg, out)  # TRL's W&B callback logs into it
    args = SFTConfig(
        output_dir=str(out), max_steps=cfg.max_steps, num_train_epochs=cfg.num_train_epochs,
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps, learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler_type, warmup_steps=cfg.warmup_steps, weight_decay=cfg.weight_decay,
        max_length=cfg.max_length, logging_steps=cfg.logging_steps,
        save_strategy="steps" if cfg.save_steps else "no", save_steps=cfg.save_steps or 500,
        save_total_limit=cfg.save_total_limit, seed=cfg.seed,
        report_to=["wandb"] if wandb_mode(cfg.wandb) != "disabled" else "none", dataloader_num_workers=0,
        **({"bf16": cfg.bf16} if cfg.bf16 is not None else {}), **cfg.extra,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer, peft_config=peft_config)
    trainer.train()
    final = out / "final"
    model = trainer.model
    if peft_config is not None and hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.save_pretrained(str(final))
    tokenizer.save_pretrained(str(final))
    (out / "sft_log.json").write_text(json.dumps(trainer.state.log_history, indent=1))
    if wb is not None:
        wb.finish()
    if dataset is None:  # gold verifications: a verifier (a prover's gold proofs are not)
        write_card(out, verifier_card(cfg, ds, tokenizer, model_path))
    return final


def verifier_card(cfg: SFTRunConfig, ds: Any, tokenizer: Any, model_path: str | None = None) -> VerifierCard:
    """The card of the SFT verifier (``verifier.card``): prompt ``data.*``; its budget is the longest gold
    verification it was trained on, in tokens plus the end of turn; no held-out judge; sampling section 5.1's."""
    longest = max((len(tokenizer(row["completion"][-1]["content"], add_special_tokens=False)["input_ids"]) + 1
                   for row in ds), default=1)
    s = Sampling()
    return VerifierCard(recipe="sft", base_model=str(model_path or cfg.model.name_or_path),
                        template=cfg.data.prompt_template, with_reference=cfg.data.with_reference,
                        train_max_tokens=longest, needed_max_tokens=longest, judge_max_tokens=None,
                        temperature=s.temperature, top_p=s.top_p, thinking=None, chat_template_kwargs=None)


def main() -> None:
    @hydra_main("sft", SFTRunConfig)
    def _main(cfg: SFTRunConfig) -> None:
        check_scale(cfg)  # a real model with tiny values stops before data or model are loaded
        logging.basicConfig(level=logging.INFO)
        train, _ = load_trajectories_for(cfg.data)
        (Path(cfg.output_dir)).mkdir(parents=True, exist_ok=True)
        (Path(cfg.output_dir) / "config.json").write_text(json.dumps(redact(cfg), indent=1, default=str))
        path = sft_train(cfg, train)
        print(path)

    _main()


if __name__ == "__main__":
    main()
