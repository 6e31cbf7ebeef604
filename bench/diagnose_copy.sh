#!/usr/bin/env bash
# Does a longer curriculum SFT teach the tiny verifier to read 6-8 step proofs? (issue 23 item 4's diagnosis,
# docs/training.md). On development data (seed=0, never the suite's seed-1 held-out set): the 3-step warm start
# (SFT 300), then SFT continued on 6-8 step chains for SFT_STEPS steps with a checkpoint every 200; each checkpoint
# is judged (2 passes, T = 0.5, 256 tokens) on the same 240 held-out records; its copy_rate and read_accuracy's
# fatal_start / fatal_shortcut are printed.
set -euo pipefail
OUT=${OUT:-runs/diagnose_copy}
SFT_STEPS=${SFT_STEPS:-1000}
PY=${PY:-.venv/bin/python}
# EXTRA: bench_learning options that override the ones below, e.g. the tiny model's shape
# EXTRA="num_heads=4 num_kv_heads=2" (the capacity ablation) or the target style (style=copy_check)
read -r -a extra <<< "${EXTRA:-}"
# LOC_EXTRA: options of the continued SFT and its checkpoints only, e.g. the SFT data's own mix
# LOC_EXTRA="sft_valid_fraction=0.2 sft_fatal_kinds=wrong_operand"; POLARITY: a finished 3-step stage of an earlier
# run with the same EXTRA (its OUT/polarity) to continue instead of training a new one
read -r -a loc_extra <<< "${LOC_EXTRA:-}"
POL=${POLARITY:-$OUT/polarity}
common=(seed=0 seeds=0 arms= report=false eval_passes=2)
loc=(min_steps=6 max_steps=8 sft_step_noise=0.5 max_completion_length=256 n_eval=240)
[ -n "${POLARITY:-}" ] || $PY bench/bench_learning.py "${common[@]}" out=$OUT/polarity "${extra[@]}"
$PY bench/bench_learning.py "${common[@]}" "${loc[@]}" out=$OUT/loc sft_steps=$SFT_STEPS \
  sft_from=$POL/sft/final exclude_problems_of=$POL/sft_train.jsonl "${extra[@]}" "${loc_extra[@]}"
for ck in $(ls -d $OUT/loc/sft/checkpoint-* | sort -t- -k2 -n); do
  n=${ck##*-}
  $PY bench/bench_learning.py "${common[@]}" "${loc[@]}" out=$OUT/eval$n init_from=$ck \
    exclude_problems_of=$OUT/loc/sft_train.jsonl "${extra[@]}" "${loc_extra[@]}"
done
$PY - "$OUT" <<'PY'
import json, sys
from pathlib import Path
sys.path.insert(0, ".")
from training.diagnostics import copy_rate, read_accuracy
from verifier.io import load_trajectories
out = Path(sys.argv[1])
for d in sorted(out.glob("eval*"), key=lambda p: int(p.name[4:])):
    gold = load_trajectories(d / "held_out.jsonl").records
    m = json.loads((d / "base" / "metrics.json").read_text())
    ra = read_accuracy(gold, d / "base" / "heldout" / "judgments.jsonl")
    print(f"sft_steps={d.name[4:]} copy_rate={copy_rate(gold, d / 'base' / 'heldout' / 'judgments.jsonl'):.3f} "
          f"reward={sum(m['per_record_reward']) / len(m['per_record_reward']):.3f} "
          f"meta_bf1={m['meta.balanced_f1']['value']:.3f} rough_bf1={m['rough.balanced_f1']['value']:.3f} "
          f"fatal_start={ra['fatal_start']:.3f} fatal_shortcut={ra['fatal_shortcut']:.3f}")
PY
