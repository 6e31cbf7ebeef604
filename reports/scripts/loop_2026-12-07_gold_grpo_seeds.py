"""The tables, decision and figure of reports/loop_2026-12-07_gold_grpo_seeds.md.

Collects the registered runs (runs/diagnose_loop_sft2000_s{0,1,2}: the gold GRPO runs from each prover seed's
``best`` checkpoint, GRPO seed = the prover seed from the earlier diagnosis and 10, 11 from this one) into
reports/data/loop_2026-12-07_gold_grpo_seeds.json when they are there (per-sample dev truth before and after, the
dev problems, and the GRPO training logs' summaries), then reads only that file. Applies the registered decision
rule. Run from the repository root: ``python reports/scripts/loop_2026-12-07_gold_grpo_seeds.py``; writes
reports/figures/loop_2026-12-07_gold_grpo_seeds.png and prints the tables."""
import json
import sys
from pathlib import Path

sys.path.insert(0, ".")
from eval.stats import BootstrapSpec, mean_delta_ci  # noqa: E402
from verifier.results import figure, save_figure  # noqa: E402

DATA = Path("reports/data/loop_2026-12-07_gold_grpo_seeds.json")
BEST = {0: 1200, 1: 2000, 2: 2000}  # each prover seed's `best` checkpoint (the earlier diagnosis)
GRPO_SEEDS = {s: (s, 10, 11) for s in BEST}


def collect() -> dict:
    doc = {}
    for s, w in BEST.items():
        out = Path(f"runs/diagnose_loop_sft2000_s{s}")
        ck = out / "prover_sft" / ("final" if w == 2000 else f"checkpoint-{w}")
        cache = f"dev_true_loop_n128_seed{s}.json"
        ids = [json.loads(x)["id"] for x in (out / "dev_problems.jsonl").read_text().splitlines() if x.strip()]
        runs = {}
        for g in GRPO_SEEDS[s]:
            name = f"grpo_lr3e-5_b128_s24_w{w}_r0-3-4-5" + ("" if g == s else f"_g{g}")
            logs = [e for e in json.loads((out / name / "train_log.json").read_text())
                    if e.get("prover/true_rate") is not None]
            runs[str(g)] = {"after": json.loads((out / name / "final" / cache).read_text()),
                            "log": {k: [e.get(k) for e in logs] for k in
                                    ("prover/true_rate", "frac_reward_zero_std", "grad_norm", "entropy",
                                     "completions/mean_length")}}
        doc[str(s)] = {"warm": w, "problems": ids, "before": json.loads((ck / cache).read_text()), "runs": runs}
    return doc


if all(Path(f"runs/diagnose_loop_sft2000_s{s}/grpo_lr3e-5_b128_s24_w{w}_r0-3-4-5_g11/final").is_dir()
       for s, w in BEST.items()):
    DATA.write_text(json.dumps(collect()))
doc = json.loads(DATA.read_text())


def mean(x):
    x = [v for v in x if v is not None]
    return sum(x) / len(x)


print("| prover seed | warm start | GRPO seed | dev true % before → after | gain [95% CI] | training batches % "
      "(first → last quarter) | groups without a gradient (mean) | grad norm (mean) | entropy (mean) |")
print("|---|---:|---:|---|---|---|---:|---:|---:|")
pooled, signs = {}, {}
for s, d in doc.items():
    spec = BootstrapSpec(n=2000, seed=int(s))  # the diagnosis's bootstrap seed (the prover seed)
    k = len(d["before"]) // len(d["problems"])
    clusters = [p for p in d["problems"] for _ in range(k)]
    gains = []
    for g, r in d["runs"].items():
        dd, lo, hi = mean_delta_ci(r["after"], d["before"], clusters, spec)
        gains.append(dd)
        c = r["log"]["prover/true_rate"]
        q = max(1, len(c) // 4)
        print(f"| {s} | {d['warm']} | {g}{' (earlier run)' if g == s else ''} | {100 * mean(d['before']):.1f} → "
              f"{100 * mean(r['after']):.1f} | {100 * dd:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] | "
              f"{100 * mean(c[:q]):.1f} → {100 * mean(c[-q:]):.1f} | {mean(r['log']['frac_reward_zero_std']):.2f} | "
              f"{mean(r['log']['grad_norm']):.3f} | {mean(r['log']['entropy']):.3f} |")
    after = [r["after"] for r in d["runs"].values()]
    pooled[s] = mean_delta_ci(after, d["before"], clusters, spec)
    p, lo, hi = pooled[s]
    signs[s] = all((x > 0) == (p > 0) for x in gains) if lo > 0 or hi < 0 else all(abs(x) <= 0.01 for x in gains)
print()
print("| prover seed | pooled gain over 3 GRPO seeds [95% CI, problems and seeds] | positive control | runs agree |")
print("|---|---|---|---|")
for s, (p, lo, hi) in pooled.items():
    print(f"| {s} | {100 * p:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] | {'yes' if lo > 0 else 'no'} | "
          f"{'yes' if signs[s] else 'no'} |")
print()
print("the checkpoint, not the GRPO seed, decides:", all(signs.values()))
print("positive control on every prover seed:", all(lo > 0 for _, lo, _ in pooled.values()))

fig, _ = figure((11.0, 3.8))
fig.clf()
a1, a2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
for i, (s, d) in enumerate(doc.items()):
    spec = BootstrapSpec(n=2000, seed=int(s))
    k = len(d["before"]) // len(d["problems"])
    clusters = [p for p in d["problems"] for _ in range(k)]
    for j, (g, r) in enumerate(d["runs"].items()):
        dd, lo, hi = mean_delta_ci(r["after"], d["before"], clusters, spec)
        x = 4 * i + j
        a1.errorbar([x], [100 * dd], yerr=[[100 * (dd - lo)], [100 * (hi - dd)]], fmt="o", color=f"C{i}", capsize=3)
        a2.plot(range(1, len(r["log"]["prover/true_rate"]) + 1), [100 * v for v in r["log"]["prover/true_rate"]],
                color=f"C{i}", alpha=0.8, label=f"prover seed {s} (from {d['warm']})" if j == 0 else None)
    p, lo, hi = pooled[s]
    a1.errorbar([4 * i + 3], [100 * p], yerr=[[100 * (p - lo)], [100 * (hi - p)]], fmt="s", color=f"C{i}",
                capsize=4, mfc="white")
a1.axhline(0, color="grey", lw=0.8)
a1.set_xticks([4 * i + j for i in range(3) for j in range(4)])
a1.set_xticklabels([f"s{s} {lab}" for s in doc for lab in (f"g{s}", "g10", "g11", "pooled")], rotation=45,
                   ha="right", fontsize=7)
a1.set_ylabel("dev true, after - before (points, 95% CI)")
a1.set_title("gold GRPO from each prover seed's best checkpoint, 3 GRPO seeds", fontsize=9)
a2.set_xlabel("gold-reward GRPO step")
a2.set_ylabel("true % of the step's completions")
a2.legend(fontsize=7)
save_figure(fig, Path("reports/figures/loop_2026-12-07_gold_grpo_seeds.png"))
print("wrote reports/figures/loop_2026-12-07_gold_grpo_seeds.png")
