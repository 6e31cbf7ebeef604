"""The figure and tables of reports/loop_2026-12-07_sft2000_start.md.

Reads the registered runs (reports/data/loop_2026-12-07_sft2000_s{0,1}.json, copied from
runs/diagnose_loop_sft2000_s{0,1}/control_loop_b128_s24_r0-3-4-5.json right after the run) and, for the comparison
with the 1200-step schedule, reports/data/loop_2026-12-07_sft_start_s{0,1}.json. Applies the registered decision
rule. Run from the repository root: ``python reports/scripts/loop_2026-12-07_sft2000_start.py``; writes
reports/figures/loop_2026-12-07_sft2000_start.png and prints the tables."""
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, ".")
from verifier.results import figure, save_figure  # noqa: E402

DATA = Path("reports/data")
SEEDS = (0, 1)  # the registered run; seed 2: the extension registered after it (reported, not in the rule)
for s in (*SEEDS, 2):  # the runs' outputs, kept beside the report
    src = Path(f"runs/diagnose_loop_sft2000_s{s}/control_loop_b128_s24_r0-3-4-5.json")
    if src.is_file():
        shutil.copyfile(src, DATA / f"loop_2026-12-07_sft2000_s{s}.json")
if (DATA / "loop_2026-12-07_sft2000_s2.json").is_file():
    SEEDS = (0, 1, 2)
runs = {s: json.loads((DATA / f"loop_2026-12-07_sft2000_s{s}.json").read_text()) for s in SEEDS}
old = {s: json.loads((DATA / f"loop_2026-12-07_sft_start_s{s}.json").read_text()) for s in (0, 1)}

print("| SFT step | " + " | ".join(f"seed {s} dev true % | seed {s} mixed groups" for s in SEEDS) + " |")
print("|---:|" + "---:|---:|" * len(SEEDS))
steps = sorted({e["step"] for d in runs.values() for e in d["sft"]})
for st in steps:
    cells = []
    for s in SEEDS:
        e = next(x for x in runs[s]["sft"] if x["step"] == st)
        cells += [f"{100 * e['dev_true']:.1f}", f"{e['mixed_groups']}/{e['groups']}"]
    print(f"| {st} | " + " | ".join(cells) + " |")
print()
print("| seed | warm start | dev true % before → after | gain [95% CI] | training batches % (first → last quarter) |")
print("|---|---:|---|---|---|")
for s, d in runs.items():
    for e in d["lrs"]:
        tag = " (best)" if e["warm"] == d["warm_start"] else ""
        print(f"| {s} | {e['warm']}{tag} | {100 * e['dev_true_before']:.1f} → {100 * e['dev_true_after']:.1f} | "
              f"{100 * e['dev_gain']:+.1f} [{100 * e['ci'][0]:+.1f}, {100 * e['ci'][1]:+.1f}] | "
              f"{100 * e['train_true_first']:.1f} → {100 * e['train_true_last']:.1f} |")
print()
past, control = {}, {}
for s, d in runs.items():
    by = {e["step"]: e["dev_true"] for e in d["sft"]}
    past[s] = by[2000] >= 0.20 and abs(by[2000] - by[1600]) < 0.10
    best = next(e for e in d["lrs"] if e["warm"] == d["warm_start"])
    control[s] = best["ci"][0] > 0
    print(f"seed {s}: past the transition {past[s]} (2000: {100 * by[2000]:.1f}%, 1600: {100 * by[1600]:.1f}%); "
          f"positive control from best={d['warm_start']}: {control[s]} (CI low {100 * best['ci'][0]:+.1f}); "
          f"{d['seconds']} s")
print("decision (seeds 0 and 1):", "adopt the 2000-step start" if all(past[s] and control[s] for s in (0, 1)) else
      "bench-loop's start stays")

fig, _ = figure((11.0, 3.8))
fig.clf()
a1, a2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
for s in SEEDS:
    for d, style, what in ((runs[s], "o-", "2000-step"), *(((old[s], "x:", "1200-step"),) if s in old else ())):
        a1.plot([e["step"] for e in d["sft"]], [100 * e["dev_true"] for e in d["sft"]], style, color=f"C{s}",
                label=f"seed {s}, {what} schedule")
a1.set_xlabel("prover SFT step")
a1.set_ylabel("dev true % (rounds 1-2, 8 samples, T 0.5)")
a1.set_title("the loop's SFT prover: 2000-step against 1200-step schedules", fontsize=9)
a1.legend(fontsize=7)
labels, i = [], 0
for s, d in runs.items():
    for e in d["lrs"]:
        a2.errorbar([i], [100 * e["dev_gain"]], yerr=[[100 * (e["dev_gain"] - e["ci"][0])],
                                                     [100 * (e["ci"][1] - e["dev_gain"])]],
                    fmt="o", color=f"C{s}", capsize=3)
        labels.append(f"seed {s}, from {e['warm']}" + (" (best)" if e["warm"] == d["warm_start"] else ""))
        i += 1
a2.axhline(0, color="grey", lw=0.8)
a2.set_xticks(range(len(labels)))
a2.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
a2.set_ylabel("dev true, after - before (points, 95% CI)")
a2.set_title("gold-reward GRPO, 24 x 128 on 256 problems, lr 3e-5", fontsize=9)
save_figure(fig, Path("reports/figures/loop_2026-12-07_sft2000_start.png"))
