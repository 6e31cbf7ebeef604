"""The figure and grid table of reports/loop_2026-12-07_sft_start_diagnosis.md.

Reads the registered runs (reports/data/loop_2026-12-07_sft_start_s{0,1}.json, copied from
runs/diagnose_loop_sft_s{0,1}/control_loop_b128_s24.json right after the run) and the exploratory gold-GRPO runs
from seed 0's checkpoint 1200 (runs/diagnose_loop_sft_s0, runs/diag_s0_r*: collected into
reports/data/loop_2026-12-07_sft_start_grid.json when those folders exist, else read from it). Run from the
repository root: ``python reports/scripts/loop_2026-12-07_sft_start.py``; writes
reports/figures/loop_2026-12-07_sft_start.png and prints the grid."""
import json
import sys
from pathlib import Path

sys.path.insert(0, ".")
from verifier.results import figure, save_figure  # noqa: E402

DATA = Path("reports/data")
GRID = DATA / "loop_2026-12-07_sft_start_grid.json"
RUNS = {  # control json -> the GRPO problems it trained on
    "runs/diagnose_loop_sft_s0/control_loop_b128_s24.json": "round 0 (64)",
    "runs/diagnose_loop_sft_s0/control_loop_b128_s48.json": "round 0 (64)",
    "runs/diag_s0_r0-3-4/control_loop_b128_s24_r0-3-4.json": "rounds 0,3,4 (192)",
    "runs/diag_s0_r0-3-4/control_loop_b128_s48_r0-3-4.json": "rounds 0,3,4 (192)",
    "runs/diag_s0_r0-3-4/control_loop_b128_s96_r0-3-4.json": "rounds 0,3,4 (192)",
    "runs/diag_s0_r0-3-4-5-6/control_loop_b128_s24_r0-3-4-5-6.json": "rounds 0,3-6 (320)",
    "runs/diag_s0_r0-3-4-5-6/control_loop_b128_s72_r0-3-4-5-6.json": "rounds 0,3-6 (320)",
}


def row(e: dict, problems: str, steps: int, registered: bool) -> dict:
    return {"problems": problems, "steps": steps, "lr": e["lr"], "dev_before": e["dev_true_before"],
            "dev_after": e["dev_true_after"], "gain": e["dev_gain"], "ci": e["ci"],
            "train_first": e["train_true_first"], "train_last": e["train_true_last"], "registered": registered}


seeds = {s: json.loads((DATA / f"loop_2026-12-07_sft_start_s{s}.json").read_text()) for s in (0, 1)}
grid = [row(e, "round 0 (64)", 24, True) | {"seed": s} for s, d in seeds.items() for e in d["lrs"]]
if all(Path(p).is_file() for p in RUNS):
    for p, problems in RUNS.items():
        d = json.loads(Path(p).read_text())
        grid += [row(e, problems, d["config"]["grpo_steps"], False) | {"seed": 0} for e in d["lrs"]]
    GRID.write_text(json.dumps(grid, indent=1))
else:
    grid = json.loads(GRID.read_text())

fig, _ = figure((11.0, 3.8))
fig.clf()
a1, a2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
for s, d in seeds.items():
    a1.plot([e["step"] for e in d["sft"]], [100 * e["dev_true"] for e in d["sft"]], "o-", color=f"C{s}",
            label=f"seed {s}: dev true %")
    a1.plot([e["step"] for e in d["sft"]], [100 * e["mixed_groups"] / e["groups"] for e in d["sft"]], "s--",
            color=f"C{s}", alpha=0.6, label=f"seed {s}: groups with a gradient %")
a1.set_xlabel("prover SFT step (the loop's 1200-step schedule)")
a1.set_title("the loop's SFT prover on rounds 1-2's problems (T 0.5)", fontsize=9)
a1.legend(fontsize=7)
labels = []
for i, g in enumerate(grid):
    a2.errorbar([i], [100 * g["gain"]], yerr=[[100 * (g["gain"] - g["ci"][0])], [100 * (g["ci"][1] - g["gain"])]],
                fmt="o" if g["registered"] else "s", color="C3" if g["registered"] else "C7", capsize=3)
    labels.append(f"s{g['seed']} {g['problems'].split(' (')[1][:-1]}p {g['steps']}st lr{g['lr']:g}")
a2.axhline(0, color="grey", lw=0.8)
a2.set_xticks(range(len(grid)))
a2.set_xticklabels(labels, rotation=60, ha="right", fontsize=6)
a2.set_ylabel("dev true, after - before (points, 95% CI)")
a2.set_title("gold-reward GRPO from the final SFT checkpoint (red: registered)", fontsize=9)
save_figure(fig, Path("reports/figures/loop_2026-12-07_sft_start.png"))
print("| seed | GRPO problems | steps | lr | dev true before → after % | gain [95% CI] | training batches % |")
print("|---|---|---:|---:|---|---|---|")
for g in grid:
    print(f"| {g['seed']} | {g['problems']} | {g['steps']} | {g['lr']:g} | {100 * g['dev_before']:.1f} → "
          f"{100 * g['dev_after']:.1f} | {100 * g['gain']:+.1f} [{100 * g['ci'][0]:+.1f}, {100 * g['ci'][1]:+.1f}]"
          f"{' (registered)' if g['registered'] else ''} | {100 * g['train_first']:.1f} → {100 * g['train_last']:.1f} |")
