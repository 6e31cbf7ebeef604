#!/usr/bin/env bash
# The Table 3 ladder on SLURM through Hydra's submitit launcher (one job per experiment), e.g.
#   launch/slurm/sweep.sh model=qwen3_8b reward.meta_judge=llm reward.endpoint.base_url=http://META:8001/v1
# Each job runs training/grpo.py on one node (configs/hydra/launcher/slurm.yaml); the meta-verifier
# runs on its own node (launch/slurm/meta_verifier.sbatch).
set -euo pipefail
exec python training/grpo.py -m hydra/launcher=slurm \
  experiment=base,rough_rl,meta_ver_rl,extra_ann,pos_aug,pess_ver \
  'output_dir=runs/sweep/${experiment_name}' "$@"
