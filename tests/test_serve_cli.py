"""The serving command line parses as documented (no server is started here)."""

import subprocess
import sys

from verifier.config import compose
from verifier.serve import SERVE_CONFIG_DIR, ServeConfig, server_args


def test_serve_overrides_compose_into_vllm_args():
    cfg = compose("serve", ServeConfig, ["model=/ckpt/verifier", "port=8123", "api_key=secret",
                                         "lora_modules={verifier: /ckpt/lora}"], config_dir=SERVE_CONFIG_DIR)
    args = server_args(cfg)
    assert args[args.index("--model") + 1] == "/ckpt/verifier" and args[args.index("--port") + 1] == "8123"
    assert "--no-enable-chunked-prefill" in args and args[args.index("--kv-cache-memory-bytes") + 1] == "128M"
    assert "--enable-lora" in args and '{"name": "verifier", "path": "/ckpt/lora"}' in args
    assert "secret" not in " ".join(args)  # the key travels in VLLM_API_KEY, never on the command line
    assert "--trust-remote-code" not in args


def test_serve_cli_accepts_model_dir():
    """`python -m verifier.serve model=DIR port=PORT ...` (the documented command) parses."""
    out = subprocess.run([sys.executable, "-m", "verifier.serve", "model=/ckpt/verifier", "port=8124",
                          "tensor_parallel_size=2", "--cfg", "job"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "model: /ckpt/verifier" in out.stdout and "tensor_parallel_size: 2" in out.stdout
