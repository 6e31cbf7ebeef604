"""The tables, decision and figure of reports/loop_2026-12-07_reliable_start.md.

Copies the registered runs' summaries (runs/diagnose_loop_sft2000_s{0,1,2}/control_loop_b128_s24_r0-3-4-5_w*.json)
into reports/data/loop_2026-12-07_reliable_s{0,1,2}.json when they are there, then reads only reports/data (the
earlier runs' outcomes: loop_2026-12-07_sft2000_s{0,1,2}.json). Applies the registered rule. Run from the repository
root: ``python reports/scripts/loop_2026-12-07_reliable_start.py``; writes
reports/figures/loop_2026-12-07_reliable_start.png and prints the tables."""
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, ".")
from verifier.results import figure, save_figure  # noqa: E402

DATA = Path("reports/data")
NEW = {0: (800, 1600), 1: (1600,), 2: (1600,)}  # the registered new warm starts
for s, w in NEW.items():
    src = Path(f"runs/diagnose_loop_sft2000_s{s}/control_loop_b128_s24_r0-3-4-5_w{'-'.join(map(str, w))}.json")
    if src.is_file():
        shutil.copyfile(src, DATA / f"loop_2026-12-07_reliable_s{s}.json")
new = {s: json.loads((DATA / f"loop_2026-12-07_reliable_s{s}.json").read_text()) for s in NEW}
old = {s: json.loads((DATA / f"loop_2026-12-07_sft2000_s{s}.json").read_text()) for s in NEW}

rows = []
for s in NEW:
    sft = {e["step"]: e for e in new[s]["sft"]}
    runs = [(e, "new") for e in new[s]["lrs"]] + [(e, "earlier") for e in old[s]["lrs"] if e["warm"] in sft]
    for e, kind in runs:
        c = sft[e["warm"]]
        share = c["train_reliable"] / c["train_groups"]
        rows.append({"seed": s, "step": e["warm"], "kind": kind, "train_true": c["train_true"],
                     "train_reliable": c["train_reliable"], "share": share, "dev_true": c["dev_true"],
                     "mixed": c["mixed_groups"], "gain": e["dev_gain"], "ci": e["ci"],
                     "predicted": share >= 0.03, "learned": e["ci"][0] > 0})
rows.sort(key=lambda r: (r["kind"] != "new", r["seed"], r["step"]))
print("| prover seed | checkpoint | run | GRPO problems true % | solved reliably (of 256) | predicted learnable "
      "(≥ 3%) | dev true % | dev mixed groups | dev gain [95% CI] | learned | match |")
print("|---|---:|---|---:|---:|---|---:|---:|---|---|---|")
for r in rows:
    print(f"| {r['seed']} | {r['step']} | {r['kind']} | {100 * r['train_true']:.1f} | {r['train_reliable']} "
          f"({100 * r['share']:.1f}%) | {'yes' if r['predicted'] else 'no'} | {100 * r['dev_true']:.1f} | "
          f"{r['mixed']}/128 | {100 * r['gain']:+.1f} [{100 * r['ci'][0]:+.1f}, {100 * r['ci'][1]:+.1f}] | "
          f"{'yes' if r['learned'] else 'no'} | {'yes' if r['predicted'] == r['learned'] else '**no**'} |")
fresh = [r for r in rows if r["kind"] == "new"]
ok = sum(r["predicted"] == r["learned"] for r in fresh)
print(f"\nnew checkpoints predicted: {ok} of {len(fresh)}; all checkpoints: "
      f"{sum(r['predicted'] == r['learned'] for r in rows)} of {len(rows)}")
print("criterion supported (registered rule: all four new):", ok == len(fresh))

fig, _ = figure((11.0, 3.8))
fig.clf()
a1, a2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
for r in rows:
    for ax, x in ((a1, 100 * r["share"]), (a2, r["mixed"])):
        ax.errorbar([x], [100 * r["gain"]], yerr=[[100 * (r["gain"] - r["ci"][0])], [100 * (r["ci"][1] - r["gain"])]],
                    fmt="o" if r["kind"] == "new" else "s", mfc=f"C{r['seed']}" if r["kind"] == "new" else "white",
                    color=f"C{r['seed']}", capsize=3)
        ax.annotate(f"s{r['seed']}@{r['step']}", (x, 100 * r["gain"]), fontsize=6, xytext=(3, 3),
                    textcoords="offset points")
a1.set_xscale("symlog", linthresh=1)
a1.axvline(3, color="grey", ls="--", lw=0.8)
for a in (a1, a2):
    a.axhline(0, color="grey", lw=0.8)
    a.set_ylabel("gold GRPO dev gain (points, 95% CI)")
a1.set_xlabel("GRPO problems solved reliably, before GRPO (% of 256; dashed: 3%)", fontsize=8)
a2.set_xlabel("dev groups with a mixed gold reward (the best rule's statistic, of 128)", fontsize=8)
a1.set_title("filled: the four registered new checkpoints; open: earlier runs", fontsize=8)
save_figure(fig, Path("reports/figures/loop_2026-12-07_reliable_start.png"))
print("wrote reports/figures/loop_2026-12-07_reliable_start.png")

# the extension: the rule (warm=reliable) on two new SFT seeds, registered before its run
EXT = (3, 4)
for s in EXT:
    src = Path(f"runs/diagnose_loop_rel_s{s}/control_loop_b128_s24_r0-3-4-5_wreliable-best.json")
    if src.is_file():
        shutil.copyfile(src, DATA / f"loop_2026-12-07_reliable_ext_s{s}.json")
ext = {s: json.loads((DATA / f"loop_2026-12-07_reliable_ext_s{s}.json").read_text()) for s in EXT}
print("\n| prover seed | checkpoint | GRPO problems true % | solved reliably (of 256) | dev true % | dev mixed groups |")
print("|---|---:|---:|---:|---:|---:|")
for s, d in ext.items():
    for e in d["sft"]:
        print(f"| {s} | {e['step']} | {100 * e['train_true']:.1f} | {e['train_reliable']} | {100 * e['dev_true']:.1f} | "
              f"{e['mixed_groups']}/128 |")
print("\n| prover seed | rule's pick | best | GRPO from | dev gain [95% CI] | prediction | holds |")
print("|---|---|---:|---:|---|---|---|")
held = []
for s, d in ext.items():
    sft = {e["step"]: e for e in d["sft"]}
    for e in d["lrs"]:
        below = sft[e["warm"]]["train_reliable"] < 0.03 * sft[e["warm"]]["train_groups"]
        if e["warm"] == d["reliable_start"]:
            pred, ok = "P1: learns", e["ci"][0] > 0
        elif below:
            pred, ok = "P2: does not learn", e["ci"][0] <= 0
        else:
            pred, ok = "none (best qualifies, not the pick)", None
        if ok is not None:
            held.append(ok)
        print(f"| {s} | {d['reliable_start'] or 'none'} | {d['warm_start']} | {e['warm']} | {100 * e['dev_gain']:+.1f} "
              f"[{100 * e['ci'][0]:+.1f}, {100 * e['ci'][1]:+.1f}] | {pred} | {'-' if ok is None else 'yes' if ok else '**no**'} |")
print("the rule supported on the new seeds (every P1 and P2 holds):", all(held) and bool(held))
