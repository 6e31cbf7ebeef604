"""Errors on the training entry (issue 40 item 6): each mistake ends ``training/grpo.py`` with one line naming the key.

Each case runs ``python training/grpo.py`` in a subprocess, as the README documents, with a config that stops
in the start-up checks (``training/ladder.py``, ``training/preflight.py``) before any data or model loads:
exit code 2, one stderr line naming the key, no traceback, nothing written. ``HYDRA_FULL_ERROR=1`` brings the
traceback back. The scale check (``ToyScaleError``) is ``tests/test_cli_errors.py``'s ``toy_scale`` case.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import free_port
from test_cli_errors import assert_one_message, run

from data_pipeline.synthetic import generate_synthetic
from verifier.errors import EXIT_USER_ERROR
from verifier.io import write_jsonl

PROG = "training/grpo.py"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """A base-variant training file (with the summary data_pipeline.grpo_dataset writes) and a held-out file."""
    d = tmp_path_factory.mktemp("grpo_errors")
    (d / "base").mkdir()
    write_jsonl(d / "base" / "trajectories.jsonl", generate_synthetic(4, seed=0))
    (d / "base" / "summary.json").write_text(json.dumps({"variant": "base"}))
    write_jsonl(d / "held_out.jsonl", generate_synthetic(4, seed=99))
    return {"dir": str(d), "train": str(d / "base" / "trajectories.jsonl"), "held": str(d / "held_out.jsonl")}


@pytest.fixture(scope="module")
def other_model_url():
    """An OpenAI-compatible ``GET /v1/models`` that serves only ``another-model``."""

    class Models(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = json.dumps({"object": "list", "data": [{"id": "another-model", "object": "model"}]}).encode()
            self.send_response(200 if self.path.rstrip("/") == "/v1/models" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            """Keep the test's stderr free of the server's request log (the assertions read stderr)."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


JSONL = ["experiment=meta_ver_rl", "data.source=jsonl"]
META_LLM = ["experiment=meta_ver_rl", "reward.meta.kind=llm", "eval.enabled=false"]
PROVER = ["experiment=prover_rl", "model.name_or_path={tiny}", "eval.enabled=false"]

CASES = {
    # mistake: (overrides, what the one line must name)
    "train_path_missing": ([*JSONL, "data.train_path={dir}/nope.jsonl", "data.eval_path={held}"],
                           ["data.train_path={dir}/nope.jsonl: no such file"]),
    "eval_path_missing": ([*JSONL, "data.train_path={train}", "data.eval_path=/mistyped/path"],
                          ["data.eval_path=/mistyped/path: no such file"]),
    "processbench_train_path_missing": (["experiment=meta_ver_rl", "data.source=processbench",
                                         "data.train_path={dir}/gsm8k.json"], ["data.train_path={dir}/gsm8k.json"]),
    "data_root_missing": ([*JSONL, "data.root={dir}/no_root"], ["data.root={dir}/no_root: no such directory"]),
    "meta_endpoint_down": ([*META_LLM, "reward.meta.endpoint.base_url={dead}"],
                           ["reward.meta.endpoint.base_url={dead}: the server does not answer"]),
    "meta_endpoint_wrong_model": ([*META_LLM, "reward.meta.endpoint.base_url={served}",
                                   "reward.meta.endpoint.model=meta-verifier"],
                                  ["reward.meta.endpoint.model='meta-verifier' is not served at {served}",
                                   "another-model"]),
    "prover_verifier_down": ([*PROVER, "prover.verifier.base_url={dead}"],
                             ["prover.verifier.base_url={dead}: the server does not answer"]),
    "prover_verifier_wrong_model": ([*PROVER, "prover.verifier.base_url={served}", "prover.verifier.model=verifier"],
                                    ["prover.verifier.model='verifier' is not served at {served}", "another-model"]),
    "prover_bad_value": ([*PROVER, "prover.reward=nope"], ["prover.reward", "'nope'"]),
    "engine_config_rejected": (["experiment=smoke", "model.name_or_path={tiny}",
                                "eval.offline.max_num_batched_tokens=1024"],
                               ["eval.offline: vLLM rejects", "eval.offline.max_num_batched_tokens=1024"]),
    "ladder_variant_mismatch": (["experiment=extra_ann", "data.source=jsonl", "data.train_path={train}",
                                 "data.eval_path={held}"], ["data.variant=extra_ann", "data.train_path={train}"]),
    "model_path_missing": (["model.name_or_path={dir}/no_model"], ["model.name_or_path={dir}/no_model: no such model"]),
}


def assert_one_line(r, *names: str) -> None:
    """Exit 2, no traceback, and stderr is the one message naming each of ``names``."""
    line = assert_one_message(r, PROG, *names)
    assert [ln for ln in r.stderr.splitlines() if ln.strip()] == [line], r.stderr[-3000:]


@pytest.mark.parametrize("kind", list(CASES))
def test_training_mistake_is_one_line_naming_the_key(kind, files, other_model_url, tiny_model):
    overrides, names = CASES[kind]
    fmt = {**files, "tiny": str(tiny_model), "served": other_model_url, "dead": f"http://127.0.0.1:{free_port()}/v1"}
    out = Path(files["dir"]) / f"run_{kind}"
    r = run([PROG, *[o.format(**fmt) for o in overrides], f"output_dir={out}", "wandb.enabled=false"])
    assert_one_line(r, *[n.format(**fmt) for n in names])
    assert not out.exists()  # stopped before writing anything


@pytest.mark.parametrize("kind,error", [("eval_path_missing", "LadderConfigError"),
                                        ("meta_endpoint_down", "PreflightError")])
def test_full_error_shows_the_traceback(kind, error, files, tiny_model):
    overrides, names = CASES[kind]
    fmt = {**files, "tiny": str(tiny_model), "dead": f"http://127.0.0.1:{free_port()}/v1"}
    r = run([PROG, *[o.format(**fmt) for o in overrides], f"output_dir={files['dir']}/full", "wandb.enabled=false"],
            env={"HYDRA_FULL_ERROR": "1"})
    assert r.returncode == EXIT_USER_ERROR, (r.returncode, r.stderr[-3000:])
    assert "Traceback" in r.stderr and error in r.stderr, r.stderr[-3000:]
    assert all(n.format(**fmt) in r.stderr for n in names), r.stderr[-3000:]
