"""Diagnosis on training data only (no held-out proof): how each verifier of the registered from-SFT loop
(reports/loop_2026-12-07_from_sft.md) judges the prover's proofs on the *training* problems of rounds 1 and 2
(the candidates of stage (a), exact truth from ``data_pipeline.synthetic_check``): per-pass acceptance of true and of
false proofs, and TPR / TNR under 8 pessimistic passes (the prover's reward) and under a majority of 8. Also the
polarity of each retraining's data. Run from the repository root after that run:
``python reports/scripts/loop_2026-12-07_calibration.py``; writes reports/data/loop_2026-12-07_calibration.json."""
import dataclasses
import json
import sys
from collections import Counter
from pathlib import Path
sys.path.insert(0, ".")
from bench.bench_loop import loop_config, parse_options
from data_pipeline.synthetic_check import check_proof
from training.loop import Loop
from verifier.engine import OpenAIEngine
from verifier.io import load_trajectories
from verifier.runner import judge

cfg = parse_options(["out=runs/bench_loop_sft", "round0_from=runs/bench_loop", "prover_from=sft", "budget=96",
                     "annotation_weight=2"])
L = Loop(dataclasses.replace(loop_config(cfg, "expert"), progress=False))
root = Path("runs/bench_loop_sft/expert")
verifiers = {f"v{r}": json.loads((root / f"round_{r}" / "verifier" / "result.json").read_text())["verifier"]
             for r in range(3)}
proofs = {f"round{r}": load_trajectories(root / f"round_{r}" / "proofs" / "candidates.jsonl").records
          for r in (1, 2)}
truth = {t.id: check_proof(t.problem, t.proof_steps).true for ts in proofs.values() for t in ts}
out: dict = {"truth": {k: dict(Counter(truth[t.id] for t in ts)) for k, ts in proofs.items()}}
try:
    for v, model in verifiers.items():
        ep = L.endpoint("verifier", model)
        for name, ts in proofs.items():
            res = judge(ts, OpenAIEngine(ep), L.judge(8))
            c: Counter = Counter()
            for t, j in zip(ts, res.judgments):
                tr = truth[t.id]
                acc = sum(p.verdict is not None and p.verdict.value == "valid" for p in j.passes)
                c[f"{'true' if tr else 'false'}_proofs"] += 1
                c[f"{'true' if tr else 'false'}_pass_accepts"] += acc
                c[f"{'true' if tr else 'false'}_all8"] += acc == 8
                c[f"{'true' if tr else 'false'}_majority"] += acc >= 5
            row = {"per_pass_tpr": c["true_pass_accepts"] / max(8 * c["true_proofs"], 1),
                   "per_pass_fpr": c["false_pass_accepts"] / max(8 * c["false_proofs"], 1),
                   "pessimistic_tpr": c["true_all8"] / max(c["true_proofs"], 1),
                   "pessimistic_fpr": c["false_all8"] / max(c["false_proofs"], 1),
                   "majority_tpr": c["true_majority"] / max(c["true_proofs"], 1),
                   "majority_fpr": c["false_majority"] / max(c["false_proofs"], 1), "counts": dict(c)}
            out[f"{v}/{name}"] = row
            print(v, name, {k: round(x, 3) for k, x in row.items() if k != "counts"}, flush=True)
        L.stop_servers()
finally:
    L.stop_servers()
for r in (1, 2):
    res = json.loads((root / f"round_{r}" / "verifier" / "result.json").read_text())
    out[f"retrain{r}_data"] = res["data"]
Path("reports/data").mkdir(parents=True, exist_ok=True)
Path("reports/data/loop_2026-12-07_calibration.json").write_text(json.dumps(out, indent=1))
print(json.dumps({k: v for k, v in out.items() if "data" in k or k == "truth"}, indent=1))
