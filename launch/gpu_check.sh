#!/usr/bin/env bash
# The GPU node check (launch/gpu_check.py) on a machine that cannot download: first the wheels carried with
# the tree are installed, without an index or their dependencies, into WHEELS/site (put first on PYTHONPATH),
# then the check runs with the arguments given. docs/cluster.md "Checking a GPU node".
#   launch/gpu_check.sh [--steps 4] [--out runs/gpu_check] [--dtype bf16|fp32] [--allow-cpu]
#   GPU_CHECK_WHEELS  folder of carried *.whl (default: wheels/ at the repository root; absent: nothing installed)
#   PYTHON            the interpreter (default: python3)
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${GPU_CHECK_WHEELS:-wheels}
PY=${PYTHON:-python3}
shopt -s nullglob
whl=("$WHEELS"/*.whl)
if (( ${#whl[@]} )); then
  site="$(cd "$WHEELS" && pwd)/site"
  "$PY" -m pip install --quiet --no-index --no-deps --target "$site" "${whl[@]}"
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
exec "$PY" launch/gpu_check.py "$@"
