#!/usr/bin/env bash
# The Table 3 ladder on SLURM through Hydra's submitit launcher (one job per experiment):
#   launch/slurm/sweep.sh model=qwen3_8b data.root=/data/grpo \
#     reward.meta.endpoint.base_url=http://META:8001/v1 hydra.launcher.partition=gpu
# Each job starts its run with `accelerate launch --config_file $ACCEL_CONFIG` (launch.accelerate_config;
# hydra.launcher.gpus_per_node processes: launch.jobs.build_job_command); the meta-verifier runs on its
# own node (launch/slurm/meta_verifier.sbatch). Every argument is a Hydra override (after these).
#   PROFILE       scale profile (configs/profile/): cluster (default) | cpu_tiny
#   LAUNCHER      hydra/launcher: slurm (default) | slurm_local (the same jobs as local processes)
#   ACCEL_CONFIG  the accelerate/DeepSpeed file of every job (default launch/accelerate/zero2.yaml)
#   SWEEP_DIR     where the runs go (default runs/sweep)
#   EXPERIMENTS   default base,rough_rl,meta_ver_rl,extra_ann,pos_aug,pess_ver
#   GEN_MODE      colocate (default: TRL's vLLM generation inside every training process, on its GPUs) | none
#                 (in-process HF generate: CPU)
# Jobs are requeued on timeout/preemption (configs/hydra/launcher/slurm.yaml) and resume (resume=true).
set -uo pipefail
PY=${PYTHON:-python}
case ${GEN_MODE:-colocate} in
  colocate) GEN_ARGS=(grpo.use_vllm=true grpo.vllm_mode=colocate) ;;
  none) GEN_ARGS=(grpo.use_vllm=false) ;;
  *) echo "sweep.sh: GEN_MODE must be colocate or none, got '$GEN_MODE'" >&2; exit 2 ;;
esac
# shellcheck disable=SC2016  # ${experiment_name} is a Hydra interpolation, resolved per job
exec "$PY" training/grpo.py -m "hydra/launcher=${LAUNCHER:-slurm}" "profile=${PROFILE:-cluster}" \
  "experiment=${EXPERIMENTS:-base,rough_rl,meta_ver_rl,extra_ann,pos_aug,pess_ver}" \
  "launch.accelerate_config=${ACCEL_CONFIG:-launch/accelerate/zero2.yaml}" \
  "output_dir=${SWEEP_DIR:-runs/sweep}/\${experiment_name}" "${GEN_ARGS[@]}" "$@"
