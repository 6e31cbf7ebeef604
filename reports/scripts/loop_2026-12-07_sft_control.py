"""The control added after the run of reports/loop_2026-12-07_from_sft.md (not registered): the loop's SFT prover
on the same held-out problems and sample keys, judged by the first verifier, and the paired differences of the
other provers from it (clustered by problem). Run from the repository root after that run:
``python reports/scripts/loop_2026-12-07_sft_control.py``; writes runs/bench_loop_sft/sft_heldout/comparison.json."""
import json
import sys
from pathlib import Path
sys.path.insert(0, ".")
from bench.bench_loop import loop_config, parse_options
from training.loop import Loop, score_heldout
from eval.stats import BootstrapSpec, mean_delta_ci

cfg = parse_options(["out=runs/bench_loop_sft", "round0_from=runs/bench_loop", "prover_from=sft", "budget=96",
                     "annotation_weight=2"])
L = Loop(loop_config(cfg, "expert"))
r0 = json.loads((Path("runs/bench_loop/expert/round_0/prover_sft/result.json")).read_text())
verifier = json.loads(Path("runs/bench_loop/expert/round_0/verifier/result.json").read_text())["verifier"]
d = Path("runs/bench_loop_sft/sft_heldout")
d.mkdir(parents=True, exist_ok=True)
try:
    ep = L.endpoint("verifier", verifier)
    rc = L.prover_run_config("sft_heldout", d, r0["prover"], L.problems_file("held-out"), ep)
    L.evaluate(d, rc.prover, r0["prover"], verifier, "sft")
finally:
    L.stop_servers()
doc = score_heldout(d / "heldout", 1000, 0)
out = {"sft": {k: v for k, v in doc.items() if k != "per_proof"}}
spec = BootstrapSpec(n=1000, seed=0)
for name, path in (("round0", "runs/bench_loop/expert/round_0/heldout.json"),
                   ("final", "runs/bench_loop_sft/expert/round_2/heldout.json"),
                   ("gold", "runs/bench_loop_sft/expert/gold/heldout.json"),
                   ("round1_previous", "runs/bench_loop/expert/round_1/heldout.json")):
    other = json.loads(Path(path).read_text())["per_proof"]
    keys = [k for k in doc["per_proof"] if k in other]
    a = [float(other[k][0]) for k in keys]
    b = [float(doc["per_proof"][k][0]) for k in keys]
    out[f"{name}-sft"] = mean_delta_ci(a, b, [k.split("/")[0] for k in keys], spec)
    out[f"{name}-sft_n"] = len(keys)
(d / "comparison.json").write_text(json.dumps(out, indent=1, default=str))
print(json.dumps(out, indent=1, default=str))
