"""The Table 3 ladder's per-row rules (section 5.4), applied before anything is loaded.

* **Per-variant data.** ``data.root=DIR`` is the folder layout ``data_pipeline.grpo_dataset`` writes, one
  ``out=DIR/<variant>`` per variant plus the held-out set of ``data_pipeline.splits``:
  ``DIR/{base,extra_ann,pos_aug}/trajectories.jsonl`` and ``DIR/held_out.jsonl``. A row's
  ``data.train_path`` / ``data.eval_path`` default to its variant's files there. A training file whose
  ``summary.json`` (written by ``grpo_dataset``) names another variant than ``data.variant`` is an error
  naming both keys, so the data ablation rows cannot silently train on the base row's data.
* **Evaluation-only rows.** ``evaluate_run=DIR`` (``pess_ver``: the ``pos_aug`` run) judges that run's
  final weights (``final_merged`` for LoRA, else ``final``) and trains nothing. In a parallel sweep the row
  waits up to ``evaluate_run_wait_s`` for that run's ``train_summary.json``.
* **The evaluation always happens.** A run whose held-out evaluation would have no data stops before
  loading unless ``eval.enabled=false`` is explicit.
* **What "base" is.** Table 3's ``base`` row is the SFT warm start evaluated untrained: ``init_from=SFT_DIR/final``,
  the starting point of every row. A real-model ``base`` row without ``init_from`` would silently evaluate
  ``model.name_or_path`` (the untrained hub model) instead, so it is an error naming ``init_from``; to mean the
  untrained model, say so: ``init_from=<model.name_or_path>``. The tiny model is exempt (tests, demos).
* **Every data file is there.** A ``data.root``, ``data.train_path``, ``data.eval_path`` (or the files another
  recipe reads instead: :func:`prepare`'s ``files``) that does not exist stops the run, naming the key.

A broken rule raises :class:`LadderConfigError` (a ``verifier.errors.InputError``: one message, exit code 2).

At CPU scale (``make bench-ladder``): ``row_config``, one run of the ladder: its row's data and reward, the same
GRPO budget for every row.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

from training.scale import is_tiny_model
from verifier.errors import InputError

log = logging.getLogger("training.ladder")

TRAIN_FILE = "trajectories.jsonl"  # data_pipeline.grpo_dataset out=DIR/<variant>
HELD_OUT_FILE = "held_out.jsonl"  # data_pipeline.splits' held-out side, at the root of the layout
SUMMARY_FILE = "summary.json"  # written by data_pipeline.grpo_dataset next to trajectories.jsonl


class LadderConfigError(InputError):
    """A ladder row whose data or evaluation would make its Table 3 number meaningless (names the key)."""


def resolve_data(cfg: Any) -> None:
    """Fill ``data.train_path`` / ``data.eval_path`` from ``data.root`` and ``data.variant`` (in place).

    >>> from training.config import GRPORunConfig
    >>> c = GRPORunConfig(); c.data.source = "jsonl"; c.data.root = "/d"; c.data.variant = "pos_aug"
    >>> resolve_data(c); c.data.train_path, c.data.eval_path
    ('/d/pos_aug/trajectories.jsonl', '/d/held_out.jsonl')
    """
    d = cfg.data
    if d.source != "jsonl" or not getattr(d, "root", None):
        return
    root = Path(d.root)
    if not d.train_path:
        d.train_path = str(root / d.variant / TRAIN_FILE)
    if not d.eval_path:
        d.eval_path = str(root / HELD_OUT_FILE)


def written_variant(train_path: str) -> str | None:
    """The variant ``data_pipeline.grpo_dataset`` wrote next to ``train_path`` (None: no summary there)."""
    summary = Path(train_path).parent / SUMMARY_FILE
    if not summary.exists():
        return None
    try:
        return json.loads(summary.read_text(encoding="utf-8")).get("variant")
    except (OSError, ValueError):
        return None


def check_variant_data(cfg: Any) -> None:
    """A training row must read the data of its own variant (``data.variant``)."""
    d = cfg.data
    if not cfg.train or d.source != "jsonl" or not d.train_path:
        return
    wrote = written_variant(d.train_path)
    if wrote is None and d.variant != "base" and Path(d.train_path).parent.name == "base":
        wrote = "base"  # the layout's base folder without its summary
    if wrote is not None and wrote != d.variant:
        raise LadderConfigError(
            f"data.variant={d.variant} but data.train_path={d.train_path} holds the {wrote!r} variant "
            f"({Path(d.train_path).parent / SUMMARY_FILE}); give each row its own data "
            f"(data.root=DIR with DIR/<variant>/{TRAIN_FILE}, or data.train_path of the {d.variant} variant)")


def check_heldout(cfg: Any) -> None:
    """A run with the evaluation on must have held-out data (real data: ``data.eval_path``)."""
    d = cfg.data
    if not cfg.eval.enabled:
        return
    if d.source == "jsonl" and not d.eval_path:
        raise LadderConfigError(
            f"{cfg.experiment_name}: eval.enabled=true but data.eval_path=null: the run would train and write no "
            f"metrics. Set data.eval_path (the held-out JSONL of data_pipeline.splits), data.root=DIR "
            f"(DIR/{HELD_OUT_FILE}), or eval.enabled=false to train without a held-out evaluation")
    if d.n_eval is not None and d.n_eval < 1:
        raise LadderConfigError(f"data.n_eval={d.n_eval}: the held-out evaluation needs at least one record "
                                f"(or eval.enabled=false)")


def data_files(cfg: Any) -> list[tuple[str, str]]:
    """(key, path) of every trajectories file a verifier run will read."""
    if cfg.data.source in ("jsonl", "processbench"):
        given = [("data.train_path", cfg.data.train_path), ("data.eval_path", cfg.data.eval_path)]
    else:  # synthetic: generated
        given = []
    return [(k, str(p)) for k, p in given if p]


def check_data_files(cfg: Any, files: Callable[[Any], list[tuple[str, str]]] = data_files) -> None:
    """Every data file of the run (``files(cfg)``) exists (checked before anything is loaded); the error names
    the key."""
    d = cfg.data
    root = d.root
    if d.source == "jsonl" and root and not Path(root).is_dir():
        raise LadderConfigError(f"data.root={root}: no such directory (the layout data_pipeline.grpo_dataset "
                                f"writes: ROOT/<variant>/{TRAIN_FILE} and ROOT/{HELD_OUT_FILE})")
    for key, path in files(cfg):
        if Path(path).exists():
            continue
        hint = ""
        if root and key == "data.train_path" and path == str(Path(root) / d.variant / TRAIN_FILE):
            hint = f" (data.root={root}: run data_pipeline.grpo_dataset variant={d.variant} out={root}/{d.variant})"
        elif root and key == "data.eval_path" and path == str(Path(root) / HELD_OUT_FILE):
            hint = f" (data.root={root}: put the held-out set of data_pipeline.splits there)"
        raise LadderConfigError(f"{key}={path}: no such file{hint}")


THINKING_MODELS = ("qwen3",)  # policies that think by default (Qwen3's chat template: enable_thinking=true)
THINK_TOKENS = 8192  # the completion budget a thinking policy needs (docs/cluster.md, "Reasoning judges and policies")


def thinking_policy(cfg: Any) -> bool:
    """A real policy that thinks: a Qwen3-class name whose chat template is not switched to non-thinking."""
    name = str(cfg.init_from or cfg.model.name_or_path)
    kw = cfg.grpo.chat_template_kwargs or {}
    if kw.get("enable_thinking") is False or "instruct-2507" in name.lower():
        return False
    return any(m in name.lower() for m in THINKING_MODELS) and not is_tiny_model(name)


def thinking_values(cfg: Any) -> list[str]:
    """The keys of a thinking policy's run that would cut or train on cut-off thinking."""
    if not cfg.train or not thinking_policy(cfg):
        return []
    g, bad = cfg.grpo, []
    if g.max_completion_length < THINK_TOKENS:
        bad.append(f"grpo.max_completion_length={g.max_completion_length} (< {THINK_TOKENS}: the thinking is cut)")
    if not g.mask_truncated_completions:
        bad.append("grpo.mask_truncated_completions=false (cut-off thinking would enter the loss)")
    return bad


def check_thinking(cfg: Any) -> None:
    bad = thinking_values(cfg)
    if bad:
        raise LadderConfigError(
            f"model {cfg.init_from or cfg.model.name_or_path!r} thinks (set grpo.chat_template_kwargs="
            "{enable_thinking: false} to turn it off), but the run's budgets do not fit thinking "
            "(profile=cluster has them):\n  " + "\n  ".join(bad))


def check_base_model(cfg: Any) -> None:
    """The ``base`` row evaluates the SFT warm start (``init_from``); without it, say which model is meant."""
    if (getattr(cfg, "experiment_name", None) != "base" or cfg.train or getattr(cfg, "evaluate_run", None)
            or cfg.init_from or is_tiny_model(str(cfg.model.name_or_path))):
        return
    name = cfg.model.name_or_path
    raise LadderConfigError(
        f"experiment=base without init_from: Table 3's base row is the SFT warm start evaluated untrained "
        f"(init_from=SFT_DIR/final, the output of training/sft.py, docs/cluster.md runbook step 10), the model every "
        f"row of the ladder starts from; without init_from it would evaluate model.name_or_path={name} instead. Set "
        f"init_from=/scratch/runs/sft/final (the same on every row), or init_from={name} to mean the untrained model")


def run_weights(run_dir: str | Path) -> Path | None:
    """The final weights a finished GRPO run left: ``final_merged`` (LoRA) or ``final`` (None: not finished)."""
    r = Path(run_dir)
    if not (r / "train_summary.json").exists():
        return None
    for name in ("final_merged", "final"):
        if (r / name / "config.json").exists():
            return r / name
    return None


def wait_for_run(run_dir: str | Path, wait_s: float, poll_s: float = 10.0) -> Path:
    """The final weights of ``run_dir``, waiting up to ``wait_s`` for that run to finish training."""
    deadline = time.monotonic() + max(0.0, float(wait_s))
    announced = False
    while True:
        w = run_weights(run_dir)
        if w is not None:
            return w
        if time.monotonic() >= deadline:
            raise LadderConfigError(
                f"evaluate_run={run_dir}: no finished run there (train_summary.json and final/ or final_merged/ "
                f"with config.json) after waiting {wait_s:.0f}s (evaluate_run_wait_s); train that row first")
        if not announced:
            print(f"waiting up to {wait_s:.0f}s for {run_dir} to finish training", flush=True)
            announced = True
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())) or poll_s)


def prepare(cfg: Any, files: Callable[[Any], list[tuple[str, str]]] = data_files, base_row: bool = True) -> None:
    """Every ladder rule of a run, before any weights or data load (``training.recipe.check``): ``files`` names the
    data files the recipe reads, ``base_row=false`` skips the rule of Table 3's ``base`` row."""
    resolve_data(cfg)
    if getattr(cfg, "evaluate_run", None):
        cfg.evaluate_run = os.path.normpath(cfg.evaluate_run)  # SWEEP/pess_ver/../pos_aug -> SWEEP/pos_aug
    if getattr(cfg, "evaluate_run", None) and cfg.train:
        raise LadderConfigError(f"evaluate_run={cfg.evaluate_run} evaluates a finished run; set train=false "
                                f"(it cannot also train)")
    check_variant_data(cfg)
    if base_row:
        check_base_model(cfg)
    check_thinking(cfg)
    check_data_files(cfg, files)
    check_heldout(cfg)


# the CPU-scale ladder (make bench-ladder): row -> (data root, variant, reward components); every row but base trains
ROW_DATA = {"rough_rl": ("data", "base", {"rough": 1.0, "meta": 0.0}), "meta_ver_rl": ("data", "base", {"meta": 1.0}),
            "extra_ann": ("data", "extra_ann", {"meta": 1.0}), "pos_aug": ("data", "pos_aug", {"meta": 1.0}),
            "extra_ann_random": ("data_random", "extra_ann", {"meta": 1.0})}


def row_config(cfg: Any, rows_dir: Path, data_dir: Path, name: str, warm: str) -> Any:
    """The ``GRPORunConfig`` of the ladder run ``name`` (``base``: the warm start ``warm`` evaluated only; else
    ``<row>/seed<k>``, GRPO from ``warm`` with seed k) in ``rows_dir/name``: its variant's data under ``data_dir``
    (``data_pipeline.grpo_dataset``'s layout), its reward, the GRPO budget of ``cfg`` (bench-ladder's options) and
    ``eval_passes``-pass pessimistic held-out judging (section 4.4)."""
    import dataclasses

    from eval.stats import BootstrapSpec
    from training.config import (DataConfig, EvalConfig, GRPORunConfig, GRPOSettings, ModelConfig, WandbSettings,
                                 heldout_judge)
    from training.rewards import RewardConfig

    row, _, seed = name.partition("/")
    root, variant, components = ("data", "base", {"meta": 1.0}) if row == "base" else ROW_DATA[row]
    ev = EvalConfig(judge=dataclasses.replace(heldout_judge(), n=cfg.eval_passes, policy="pessimistic",
                                              max_tokens=cfg.max_completion_length, temperature=cfg.temperature,
                                              run_seed=cfg.seed), bootstrap=BootstrapSpec(n=200, seed=cfg.seed))
    data = DataConfig(source="jsonl", root=str(data_dir / root), variant=variant, n_train=None, n_eval=None,
                      prompt_template="verify_compact")
    return GRPORunConfig(
        experiment_name=name.split("/")[0], output_dir=str(rows_dir / name), train=row != "base",
        init_from=warm, model=ModelConfig(name_or_path=warm), data=data,
        reward=RewardConfig(components=components),
        grpo=GRPOSettings(max_steps=cfg.grpo_steps, per_device_train_batch_size=cfg.grpo_batch,
                          num_generations=cfg.num_generations, max_completion_length=cfg.max_completion_length,
                          learning_rate=cfg.grpo_lr, temperature=cfg.temperature, save_steps=10_000, beta=0.0,
                          gradient_accumulation_steps=1, warmup_steps=0, bf16=False, logging_steps=1,
                          seed=cfg.seed if row == "base" else int(seed.removeprefix("seed")),
                          log_completions=False, skip_zero_grad_steps=True),
        eval=ev, wandb=WandbSettings(enabled=False))
