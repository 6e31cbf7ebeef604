#!/usr/bin/env bash
# The Table 3 ladder on SLURM through Hydra's submitit launcher (one job per experiment):
#   launch/slurm/sweep.sh model=qwen3_8b init_from=/scratch/runs/sft/final data.root=/data/grpo \
#     reward.meta.endpoint.base_url=http://META:8001/v1 hydra.launcher.partition=gpu
# Each job starts its run with `accelerate launch --config_file $ACCEL_CONFIG` (launch.accelerate_config;
# hydra.launcher.gpus_per_node processes: launch.jobs.build_job_command); the meta-verifier runs on its
# own node (launch/slurm/meta_verifier.sbatch). Every argument is a Hydra override (after these).
#   PROFILE       scale profile (configs/profile/): cluster (default) | cpu_tiny
#   LAUNCHER      hydra/launcher: slurm (default) | slurm_local (the same jobs as local processes) | basic
#   ACCEL_CONFIG  the accelerate/DeepSpeed file of every job (default launch/accelerate/zero2.yaml)
#   SWEEP_DIR     where the runs go (default runs/sweep)
#   EXPERIMENTS   default base,rough_rl,meta_ver_rl,extra_ann,pos_aug,pess_ver
#   GEN_MODE      colocate (default: TRL's vLLM generation inside every training process, on its GPUs) | none
#                 (in-process HF generate: CPU)
# Jobs are requeued on timeout/preemption (configs/hydra/launcher/slurm.yaml) and resume (resume=true).
# pess_ver evaluates pos_aug's final weights. With LAUNCHER=slurm and both rows in EXPERIMENTS it is not a job of
# the array: the other rows are submitted first (Hydra sweep dir SWEEP_DIR/.hydra/rows, or hydra.sweep.dir=D/rows),
# then pess_ver as its own job with `--dependency=afterok:<pos_aug's job id> --kill-on-invalid-dep=yes`
# (hydra.launcher.additional_parameters) and evaluate_run_wait_s=0 (sweep dir .../pess_ver): it is pending, holding
# no GPUs, until pos_aug has finished, and is cancelled if pos_aug fails (job folders of an earlier run of the same
# sweep dir are not taken for this run's pos_aug). The script waits for both sweeps.
set -uo pipefail
PY=${PYTHON:-python}
case ${GEN_MODE:-colocate} in
  colocate) GEN_ARGS=(grpo.use_vllm=true grpo.vllm_mode=colocate) ;;
  none) GEN_ARGS=(grpo.use_vllm=false) ;;
  *) echo "sweep.sh: GEN_MODE must be colocate or none, got '$GEN_MODE'" >&2; exit 2 ;;
esac
LAUNCHER=${LAUNCHER:-slurm}
EXPERIMENTS=${EXPERIMENTS:-base,rough_rl,meta_ver_rl,extra_ann,pos_aug,pess_ver}
SWEEP_DIR=${SWEEP_DIR:-runs/sweep}
# shellcheck disable=SC2016  # ${experiment_name} is a Hydra interpolation, resolved per job
COMMON=("hydra/launcher=${LAUNCHER}" "profile=${PROFILE:-cluster}"
  "launch.accelerate_config=${ACCEL_CONFIG:-launch/accelerate/zero2.yaml}"
  "output_dir=${SWEEP_DIR}/\${experiment_name}" "${GEN_ARGS[@]}")
IFS=, read -r -a EXPS <<< "$EXPERIMENTS"
ROWS=()
for e in "${EXPS[@]}"; do [[ $e == pess_ver ]] || ROWS+=("$e"); done
POS_AUG_INDEX=-1
for i in "${!ROWS[@]}"; do [[ ${ROWS[$i]} == pos_aug ]] && POS_AUG_INDEX=$i; done
if [[ $LAUNCHER != slurm || ${#ROWS[@]} -eq ${#EXPS[@]} || $POS_AUG_INDEX -lt 0 ]]; then
  # one sweep: no pess_ver, or no pos_aug to depend on (pess_ver then waits up to evaluate_run_wait_s), or not SLURM
  exec "$PY" training/grpo.py -m "${COMMON[0]}" "${COMMON[1]}" "experiment=${EXPERIMENTS}" "${COMMON[@]:2}" "$@"
fi
HYDRA_DIR=${SWEEP_DIR}/.hydra  # hydra.sweep.dir=D among the arguments: D/rows and D/pess_ver
ARGS=()
for a in "$@"; do
  if [[ $a == hydra.sweep.dir=* ]]; then HYDRA_DIR=${a#hydra.sweep.dir=}; else ARGS+=("$a"); fi
done
ROWS_CSV=$(IFS=,; echo "${ROWS[*]}")
SUBMITIT=${HYDRA_DIR}/rows/.submitit
declare -A OLD=()  # job folders of an earlier run of this sweep: not this run's pos_aug
for d in "$SUBMITIT"/*; do [[ -d $d ]] && OLD[$(basename "$d")]=1; done
"$PY" training/grpo.py -m "${COMMON[0]}" "${COMMON[1]}" "experiment=${ROWS_CSV}" "${COMMON[@]:2}" "${ARGS[@]}" \
  "hydra.sweep.dir=${HYDRA_DIR}/rows" &
ROWS_PID=$!
# the array's tasks are submitted in ROWS order: pos_aug's job id is <array id>_<its index> (submitit's folder);
# submitit submits a single row as a plain job (folder <job id>)
PATTERN="^[0-9]+_${POS_AUG_INDEX}\$"
[[ ${#ROWS[@]} -eq 1 ]] && PATTERN="^[0-9]+\$"
JOB=
while true; do
  alive=1
  kill -0 "$ROWS_PID" 2>/dev/null || alive=0  # checked before the scan: a sweep that submitted, then ended, is seen
  for d in "$SUBMITIT"/*; do
    b=$(basename "$d")
    [[ -d $d && $b =~ $PATTERN && -z ${OLD[$b]:-} ]] && JOB=$b
  done
  [[ -n $JOB ]] && break
  if (( ! alive )); then
    wait "$ROWS_PID"; rc=$?
    echo "sweep.sh: the sweep of ${ROWS_CSV} ended (exit $rc) before pos_aug's job appeared in $SUBMITIT;" \
      "pess_ver not submitted" >&2
    exit $(( rc ? rc : 1 ))
  fi
  sleep "${POLL_S:-5}"
done
echo "sweep.sh: pos_aug is job $JOB; pess_ver is submitted with --dependency=afterok:$JOB" >&2
"$PY" training/grpo.py -m "${COMMON[0]}" "${COMMON[1]}" experiment=pess_ver "${COMMON[@]:2}" "${ARGS[@]}" \
  evaluate_run_wait_s=0 "++hydra.launcher.additional_parameters.dependency=afterok:${JOB}" \
  "++hydra.launcher.additional_parameters.kill_on_invalid_dep=yes" "hydra.sweep.dir=${HYDRA_DIR}/pess_ver" &
PESS_PID=$!
wait "$ROWS_PID"; rc_rows=$?
wait "$PESS_PID"; rc_pess=$?
exit $(( rc_rows ? rc_rows : rc_pess ))
