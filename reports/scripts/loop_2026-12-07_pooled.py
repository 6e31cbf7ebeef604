"""The pooled figure registered in reports/loop_2026-12-07_seed1_full.md: the final prover minus the SFT prover
(held-out true accuracy), over seeds 0 and 1, one paired bootstrap clustered by problem (problem ids are derived
from the problem's text, so a problem drawn by both seeds is one cluster). Also each seed alone and the same for
final - round 0. Run from the repository root after both runs:
``python reports/scripts/loop_2026-12-07_pooled.py``; writes reports/data/loop_2026-12-07_pooled.json."""
import json
import sys
from pathlib import Path
sys.path.insert(0, ".")
from eval.stats import BootstrapSpec, mean_delta_ci
from training.loop import score_heldout

SEEDS = {  # seed: (round 0, final, SFT control) held-out per-proof tables
    0: ("runs/bench_loop/expert/round_0/heldout.json", "runs/bench_loop_sft/expert/round_2/heldout.json",
        "runs/bench_loop_sft/sft_heldout/heldout"),
    1: ("runs/bench_loop_s1/expert/round_0/heldout.json", "runs/bench_loop_s1/expert/round_2/heldout.json",
        "runs/bench_loop_s1/expert/sft/heldout.json"),
}


def per_proof(path: str) -> dict:
    p = Path(path)
    return (json.loads(p.read_text()) if p.suffix == ".json" else score_heldout(p, 10, 0))["per_proof"]


spec = BootstrapSpec(n=1000, seed=0)
out: dict = {}
for against, idx in (("sft", 2), ("round0", 0)):
    pooled_a, pooled_b, pooled_c = [], [], []
    for seed, paths in SEEDS.items():
        final, base = per_proof(paths[1]), per_proof(paths[idx])
        keys = sorted(set(final) & set(base))
        a, b = [float(final[k][0]) for k in keys], [float(base[k][0]) for k in keys]
        c = [k.rsplit("/", 1)[0] for k in keys]
        d, lo, hi = mean_delta_ci(a, b, c, spec)
        out[f"seed{seed}/final-{against}"] = {"n": len(keys), "problems": len(set(c)), "delta": d, "ci": [lo, hi],
                                             "final": sum(a) / len(a), against: sum(b) / len(b)}
        pooled_a += a
        pooled_b += b
        pooled_c += c
    d, lo, hi = mean_delta_ci(pooled_a, pooled_b, pooled_c, spec)
    out[f"pooled/final-{against}"] = {"n": len(pooled_a), "problems": len(set(pooled_c)), "delta": d, "ci": [lo, hi]}
Path("reports/data").mkdir(parents=True, exist_ok=True)
Path("reports/data/loop_2026-12-07_pooled.json").write_text(json.dumps(out, indent=1))
for k, v in out.items():
    print(f"{k}: {100 * v['delta']:+.1f} [{100 * v['ci'][0]:+.1f}, {100 * v['ci'][1]:+.1f}] n={v['n']} "
          f"problems={v['problems']}")
