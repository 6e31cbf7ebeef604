"""A prepared check of one GPU node: SFT and GRPO steps of the tiny model, then held-out judging, one last line.

``python launch/gpu_check.py [--steps 4] [--out runs/gpu_check] [--dtype bf16|fp32] [--allow-cpu]``
(``launch/gpu_check.sh`` first installs the wheels carried beside the tree; docs/cluster.md "Checking a GPU node").

1. Preflight, before any work: torch, transformers, peft, accelerate, trl and datasets import (their versions
   are printed), then CUDA (bf16 on it, for ``--dtype bf16``), then this project's modules. A missing package is
   one line naming its import and the wheel to carry; no CUDA without ``--allow-cpu`` is one line naming CUDA;
   both exit 2, as does a bad option.
2. The tiny model (``verifier.tiny_model``, built locally: nothing is downloaded) under ``OUT/model``.
3. ``--steps`` SFT steps (``training.sft.sft_train``) on synthetic gold verifications, in bf16 (model weights
   ``bfloat16`` and ``bf16=True``, as ``model=qwen3_8b sft_profile=cluster``) or fp32, under ``OUT/sft``.
4. ``--steps`` GRPO steps (``training.grpo.run``) from the SFT weights with the rule meta-verifier reward and
   TRL's in-process transformers generation (no vLLM), the same dtype, under ``OUT/grpo``.
5. Held-out judging: the GRPO weights judge held-out synthetic proofs with ``transformers`` ``generate``
   (greedy); the share of parseable verdicts (``verifier.parser``) is reported, not required.

Everything measured is in ``OUT/gpu_check.json``; the last line printed is::

    device=<name> bf16=<0|1> sft_steps=<n> sft_loss_first=<r> sft_loss_last=<r> grpo_steps=<n> \
grpo_s_per_step=<r> heldout_parsed=<r> seconds=<n>
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
for _name, _value in {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
                      "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled"}.items():
    os.environ.setdefault(_name, _value)

PROG = "gpu_check"
EXIT_PREFLIGHT = 2
# the packages the check needs first (torch, transformers, peft and accelerate are preinstalled on a lent node)
PACKAGES = ("torch", "transformers", "peft", "accelerate", "trl", "datasets")
# this project's modules the check runs (their imports name whatever else is missing)
PROJECT_MODULES = ("verifier.tiny_model", "verifier.parser", "verifier.templates", "training.data",
                   "training.sft", "training.grpo")
# import name -> the distribution whose wheel provides it (where the two differ)
WHEEL_OF = {"yaml": "PyYAML", "sklearn": "scikit-learn", "hydra": "hydra-core", "antlr4": "antlr4-python3-runtime",
            "dateutil": "python-dateutil", "PIL": "pillow", "google": "protobuf", "attr": "attrs",
            "huggingface_hub": "huggingface-hub", "markdown_it": "markdown-it-py", "math_verify": "math-verify",
            "latex2sympy2_extended": "latex2sympy2-extended", "typing_extensions": "typing-extensions"}
# wheels that fit beside the tree (pure Python or a few hundred KiB compiled; launch/gpu_check.sh installs them)
SMALL_WHEELS = ("trl", "datasets", "hydra-core", "omegaconf", "antlr4-python3-runtime", "setproctitle", "rich",
                "markdown-it-py", "mdurl", "pygments", "dill", "multiprocess", "xxhash", "fsspec", "openai",
                "math-verify", "latex2sympy2-extended", "joblib", "threadpoolctl")
SFT_BATCH = 8
GRPO_BATCH = 4  # completions per step: GRPO_BATCH // NUM_GENERATIONS prompts
NUM_GENERATIONS = 4
COMPLETION_TOKENS = 32  # GRPO's budget per completion
HELDOUT = 8  # held-out proofs judged
HELDOUT_TOKENS = 64  # the judge's budget per proof
TEMPLATE = "verify_compact"  # short prompts: the tiny model's check measures steps, not long contexts
SYNTHETIC = {"min_steps": 3, "max_steps": 4, "max_operand": 20, "recoverable_rate": 0.0, "qe_fraction": 0.0}


def fail(message: str) -> NoReturn:
    """One line on stderr and exit 2 (bad option, missing package, no CUDA)."""
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_PREFLIGHT)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse prints usage and the error over several lines
        fail(f"{message} (options: --steps N --out DIR --dtype bf16|fp32 --allow-cpu)")


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = _Parser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=_positive, default=4, help="SFT steps and GRPO steps (each)")
    p.add_argument("--out", default=str(REPO / "runs" / "gpu_check"), help="a new or empty folder")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16", help="weights and training precision")
    p.add_argument("--allow-cpu", action="store_true", help="run on CPU when there is no CUDA device")
    args = p.parse_args(argv)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        fail(f"--out {out} exists and is not an empty folder: use another --out or delete it")
    return args


def wheel_name(module: str) -> str:
    """The distribution to carry for a missing top-level import.

    >>> wheel_name("trl"), wheel_name("sklearn"), wheel_name("hydra")
    ('trl', 'scikit-learn', 'hydra-core')
    """
    return WHEEL_OF.get(module, module)


def _missing_line(missing: dict[str, str]) -> str:
    wheels = sorted({wheel_name(m) for m in missing})
    small = [w for w in wheels if w in SMALL_WHEELS]
    big = [w for w in wheels if w not in SMALL_WHEELS]
    how = (f"carry {'the wheels of ' + ', '.join(small) if small else ''}"
           f"{' and ' if small and big else ''}{'(large, compiled) ' + ', '.join(big) if big else ''} "
           f"under wheels/ (64 MiB in all) and run launch/gpu_check.sh")
    what = "; ".join(f"{m} ({why})" for m, why in missing.items())
    return f"missing package(s): {what}: {how}"


def preflight(allow_cpu: bool, dtype: str) -> dict[str, Any]:
    """Versions of the needed packages and the device; ``fail`` when one is missing or CUDA is absent."""
    versions: dict[str, str] = {}
    missing: dict[str, str] = {}
    for name in PACKAGES:
        try:
            mod = importlib.import_module(name)
        except ImportError as e:  # ModuleNotFoundError.name: the module really absent (maybe a dependency)
            top = (getattr(e, "name", None) or name).split(".")[0]
            missing.setdefault(top, f"import {name}: {e}")
            continue
        versions[name] = str(getattr(mod, "__version__", "?"))
    print("preflight: " + " ".join(f"{n}={versions.get(n, 'MISSING')}" for n in PACKAGES), flush=True)
    if missing:
        fail(_missing_line(missing))
    import torch

    if torch.cuda.is_available():
        device = torch.cuda.get_device_name(0)
        if dtype == "bf16" and not torch.cuda.is_bf16_supported():
            fail(f"CUDA device {device!r} does not support bf16: use --dtype fp32")
    elif allow_cpu:
        device = "cpu"
    else:
        fail(f"no CUDA device (torch {torch.__version__}, built for CUDA {torch.version.cuda}): run on a GPU node "
             f"or pass --allow-cpu")
    for name in PROJECT_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as e:
            top = (getattr(e, "name", None) or name).split(".")[0]
            fail(_missing_line({top: f"import {name}: {e}"}))
    print(f"preflight: device={device} cuda={torch.version.cuda} bf16={int(dtype == 'bf16')}", flush=True)
    return {"versions": versions, "device": device, "cuda": torch.version.cuda}


def _losses(log_history: list[dict[str, Any]]) -> list[float]:
    return [float(h["loss"]) for h in log_history if "loss" in h]


def _cpu(cpu: bool) -> dict[str, Any]:
    """Trainer arguments of a CPU run (``--allow-cpu``): bf16 on CPU needs ``use_cpu``."""
    return {"use_cpu": True} if cpu else {}


def run_sft(out: Path, model: Path, steps: int, bf16: bool, cpu: bool) -> tuple[Path, list[float]]:
    from data_pipeline.synthetic import generate_synthetic
    from training.config import DataConfig, ModelConfig
    from training.sft import SFTRunConfig, sft_train
    from verifier.results import WandbConfig

    cfg = SFTRunConfig(output_dir=str(out / "sft"), model=ModelConfig(name_or_path=str(model),
                                                                    dtype="bfloat16" if bf16 else "float32"),
                       data=DataConfig(source="synthetic", prompt_template=TEMPLATE, synthetic=dict(SYNTHETIC)),
                       max_steps=steps, per_device_train_batch_size=SFT_BATCH, gradient_accumulation_steps=1,
                       learning_rate=1e-3, warmup_steps=0, max_length=1024, logging_steps=1, save_steps=0,
                       save_total_limit=None, bf16=bf16, wandb=WandbConfig(enabled=False), extra=_cpu(cpu))
    final = sft_train(cfg, generate_synthetic(SFT_BATCH * steps, seed=0, **SYNTHETIC), model_path=str(model))
    return final, _losses(json.loads((out / "sft" / "sft_log.json").read_text()))


def run_grpo(out: Path, init: Path, steps: int, bf16: bool, cpu: bool) -> tuple[Path, int, float]:
    from training.config import DataConfig, EvalConfig, GRPORunConfig, GRPOSettings, ModelConfig
    from training.grpo import run
    from verifier.results import WandbConfig

    cfg = GRPORunConfig(
        experiment_name="gpu_check", output_dir=str(out / "grpo"), init_from=str(init),
        model=ModelConfig(name_or_path=str(init), dtype="bfloat16" if bf16 else "float32"),
        data=DataConfig(source="synthetic", n_train=GRPO_BATCH // NUM_GENERATIONS * steps, n_eval=HELDOUT,
                        prompt_template=TEMPLATE, synthetic=dict(SYNTHETIC)),
        grpo=GRPOSettings(max_steps=steps, per_device_train_batch_size=GRPO_BATCH, gradient_accumulation_steps=1,
                          num_generations=NUM_GENERATIONS, max_completion_length=COMPLETION_TOKENS,
                          learning_rate=1e-5, warmup_steps=0, save_steps=10_000, save_total_limit=None, bf16=bf16,
                          use_vllm=False, logging_steps=1, log_completions=False, extra=_cpu(cpu)),
        eval=EvalConfig(enabled=False), wandb=WandbConfig(enabled=False))
    t0 = time.monotonic()
    run(cfg)
    wall = time.monotonic() - t0
    hist = json.loads((out / "grpo" / "train_log.json").read_text())
    step_s = [float(h["phase/step_s"]) for h in hist if "phase/step_s" in h]
    # the median step: the first one also warms kernels and caches up
    done = int(json.loads((out / "grpo" / "train_summary.json").read_text())["train"]["global_step"])
    return out / "grpo" / "final", done, statistics.median(step_s) if step_s else wall / max(done, 1)


def judge_heldout(model_dir: Path, bf16: bool, device: str) -> list[dict[str, Any]]:
    """Held-out synthetic proofs judged by the trained weights with transformers ``generate`` (greedy)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.config import DataConfig
    from training.data import load_trajectories_for
    from verifier.parser import ParseStatus, parse_verification
    from verifier.templates import as_messages, verification_prompt

    _, held = load_trajectories_for(DataConfig(source="synthetic", n_train=1, n_eval=HELDOUT,
                                               prompt_template=TEMPLATE, synthetic=dict(SYNTHETIC)))
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16 if bf16 else torch.float32)
    model.to("cuda" if device != "cpu" else "cpu").eval()
    rows = []
    for traj in held:
        text = tok.apply_chat_template(as_messages(verification_prompt(traj, with_reference=False, template=TEMPLATE)),
                                       tokenize=False, add_generation_prompt=True)
        enc = tok(text, return_tensors="pt", add_special_tokens=False).to(model.device)
        with torch.no_grad():
            ids = model.generate(**enc, max_new_tokens=HELDOUT_TOKENS, do_sample=False, pad_token_id=tok.pad_token_id)
        completion = tok.decode(ids[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        parsed = parse_verification(completion, n_steps=len(traj.proof_steps))
        rows.append({"id": traj.id, "status": parsed.status.value, "parsed": parsed.status is ParseStatus.OK,
                     "completion": completion})
    return rows


def main(argv: list[str] | None = None) -> str:
    args = parse_args(argv)
    t0 = time.monotonic()
    info = preflight(args.allow_cpu, args.dtype)
    bf16 = args.dtype == "bf16"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    from verifier.tiny_model import TinyModelConfig, build

    model = build(TinyModelConfig(out=str(out / "model")))
    sft_final, sft_losses = run_sft(out, model, args.steps, bf16, info["device"] == "cpu")
    grpo_final, grpo_steps, s_per_step = run_grpo(out, sft_final, args.steps, bf16, info["device"] == "cpu")
    rows = judge_heldout(grpo_final, bf16, info["device"])
    parsed = sum(r["parsed"] for r in rows) / len(rows) if rows else float("nan")
    seconds = time.monotonic() - t0
    doc = {**info, "dtype": args.dtype, "steps": args.steps, "sft_losses": sft_losses, "grpo_steps": grpo_steps,
           "grpo_s_per_step": s_per_step, "heldout": rows, "heldout_parsed": parsed, "seconds": seconds}
    (out / "gpu_check.json").write_text(json.dumps(doc, indent=1))
    nan = float("nan")
    line = (f"device={info['device'].replace(' ', '_')} bf16={int(bf16)} sft_steps={len(sft_losses)} "
            f"sft_loss_first={sft_losses[0] if sft_losses else nan:.4f} "
            f"sft_loss_last={sft_losses[-1] if sft_losses else nan:.4f} grpo_steps={grpo_steps} "
            f"grpo_s_per_step={s_per_step:.3f} heldout_parsed={parsed:.3f} seconds={seconds:.0f}")
    print(line, flush=True)
    return line


if __name__ == "__main__":
    main()
