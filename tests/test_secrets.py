"""No API key reaches a file a run writes (issue 14, item 6).

Every command runs as users run it, against the session's real vLLM server, with a
recognisable canary key passed where it is not needed for auth: on the command line
(``...api_key=sk-SECRET-canary-1234`` for an endpoint the run configures but does not
call) and in the environment (``WANDB_API_KEY``, W&B offline). The keys the server
does need (``test-key``) are passed on the command line too. Then every file the run
wrote (recursively: outputs, W&B offline runs, logs, pid files, caches) and its stdout
and stderr are searched for both keys.

Issue 26.2: a two-job ``-m`` sweep and a ``hydra/launcher=submitit_local`` launch (Hydra saving every
job's ``.hydra/``, submitit pickling each job) leave no key in any file; a running command's
``/proc/PID/cmdline`` has none; ``endpoint.api_key_env`` names the variable a key comes from.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import API_KEY, free_port

REPO = Path(__file__).resolve().parents[1]
CANARY = "sk-SECRET-canary-1234"
SECRETS = (CANARY.encode(), API_KEY.encode())


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="offline", WANDB_API_KEY=CANARY,
               WANDB_SILENT="true", VERIFIER_SERVE_PIDFILE=str(tmp / "serve.pid"))
    env.pop("VERIFIER_API_KEY", None)
    env.pop("OPENAI_API_KEY", None)
    return env


def leaks(root: Path) -> list[str]:
    """Files under ``root`` (recursively) that contain a secret."""
    found = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            found += [f"{p.relative_to(root)}: {s.decode()}" for s in SECRETS if s in data]
    return found


def run_cmd(tmp: Path, args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, *args], cwd=tmp, env=_env(tmp), capture_output=True, timeout=timeout,
                       check=False)
    assert p.returncode == 0, (args[:2], p.stdout[-2000:], p.stderr[-3000:])
    out = p.stdout + p.stderr
    assert not [s for s in SECRETS if s in out], (args[:2], "secret in stdout/stderr")
    return p


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    from data_pipeline.synthetic import generate_synthetic
    from verifier.io import write_jsonl

    d = tmp_path_factory.mktemp("secret_inputs")
    write_jsonl(d / "trajs.jsonl", generate_synthetic(2, seed=3, min_steps=2, max_steps=2))
    write_jsonl(d / "problems.jsonl", [{"id": f"q{i}", "problem": f"Prove that {i} + {i} is even."} for i in range(2)])
    write_jsonl(d / "preds.jsonl", [{"id": t.id, "verdict": "valid", "first_error_step": -1}
                                    for t in generate_synthetic(2, seed=3, min_steps=2, max_steps=2)])
    return d


def _ep(server, prefix: str) -> list[str]:
    return [f"{prefix}.base_url={server.base_url}", f"{prefix}.api_key={API_KEY}", f"{prefix}.model={server.model_name}",
            f"{prefix}.max_retries=1"]


def _ep_list(server) -> str:
    return f"[{{base_url: '{server.base_url}', model: '{server.model_name}', api_key: {API_KEY}, max_retries: 1}}]"


def _commands(s, inputs: Path, tiny_model: Path) -> dict[str, list[list[str]]]:
    """Each case: the commands run one after the other in one fresh directory."""
    trajs, problems, preds = inputs / "trajs.jsonl", inputs / "problems.jsonl", inputs / "preds.jsonl"
    data = REPO / "tests" / "data"
    grpo = [str(REPO / "training" / "grpo.py"), f"model.name_or_path={tiny_model}", "data.n_eval=2",
            "eval.judge.max_tokens=8", "eval.bootstrap.n=20", f"reward.endpoint.api_key={CANARY}"]  # an old key: its note is redacted too
    return {
        "judge": [["-m", "eval.judge", f"input={trajs}", "output=judge/j.jsonl", *_ep(s, "endpoint"), "judge.n=2",
                   "judge.max_tokens=8", "progress=false"]],
        "score": [["-m", "eval.score", f"gold={trajs}", f"predictions={preds}", "out=score", "bootstrap_n=20",
                   "wandb.enabled=true"]],
        "verifierbench": [["-m", "eval.verifierbench", f"data={trajs}", "out=vb", *_ep(s, "verifier"), "judge.n=2",
                           "judge.max_tokens=8", f"meta.endpoint.api_key={CANARY}", "bootstrap_n=20",
                           "progress=false"]],
        "proverbench": [["-m", "eval.proverbench", f"problems={problems}", "out=pb", *_ep(s, "generator"),
                         *_ep(s, "verifier"), "generation.max_tokens=8", "judge.n=2", "judge.max_tokens=8",
                         "bootstrap_n=20", "progress=false"]],
        "tcs": [["-m", "eval.tcs", f"input={data / 'tcs_illustrative.jsonl'}", "out=tcs", *_ep(s, "endpoint"),
                 "progress=false", "generator_a.max_tokens=8", "generator_b.max_tokens=8", "verifier.max_tokens=8",
                 "self_verifier.max_tokens=8", "critic.max_tokens=8", "critic.n=2"]],
        "proofjudge": [["-m", "eval.proofjudge", f"input={data / 'proofjudge_illustrative.jsonl'}", "out=proofjudge",
                        *_ep(s, "endpoint"), "progress=false", "judge.n=1", "judge.max_tokens=8", "bootstrap.n=20"]],
        "ineqmath": [["-m", "eval.ineqmath", f"input={data / 'ineqmath_illustrative.jsonl'}", "out=ineqmath",
                      *_ep(s, "endpoint"), "generate=true", "progress=false", "solver.max_tokens=8",
                      "answer_judge.max_tokens=8",
                      *[f"step_judges.{k}.max_tokens=8" for k in ("toy_case", "logical_gap",
                                                                    "numerical_approximation", "numerical_computation")]]],
        "selection": [["-m", "data_pipeline.selection", f"trajectories={trajs}", "out=sel", *_ep(s, "endpoint"),
                       "judge.n=2", "judge.max_tokens=8", "plot=false", "progress=false"]],
        "augment": [["-m", "data_pipeline.augment", f"input={trajs}", "out=aug", *_ep(s, "generator"),
                     f"verifiers={_ep_list(s)}", "verify.n=1", "verify.max_tokens=8", "max_tokens=8", "limit=1",
                     "progress=false"]],
        "candidates": [["-m", "data_pipeline.candidates", f"problems={problems}", "out=cand",
                        f"generators={_ep_list(s)}", *_ep(s, "verifier"), "k=1", "max_tokens=8", "progress=false"]],
        "curate": [["-m", "data_pipeline.curate", f"input={problems}", "out=curate",
                    f"classifier.endpoint.api_key={CANARY}", "progress=false", "plot=false"]],
        "sft": [[str(REPO / "training" / "sft.py"), "output_dir=sft", f"model.name_or_path={tiny_model}",
                 "max_steps=1", "per_device_train_batch_size=2", "data.n_train=4", "logging_steps=1",
                 "wandb.enabled=true"]],
        # GRPO with W&B offline, then the ablation report (W&B) over its run
        "grpo": [[*grpo, "experiment=smoke", "output_dir=grpo", "grpo.max_steps=1", "grpo.save_steps=1",
                  "grpo.per_device_train_batch_size=4", "grpo.max_completion_length=8", "data.n_train=4"],
                 ["-m", "eval.report", "runs=[grpo]", "out=report", "wandb.enabled=true"]],
        # a -m sweep saves its config to <sweep dir>/multirun.yaml (verifier.hydra_callbacks.RedactSavedConfig)
        "grpo_sweep": [[grpo[0], "-m", *grpo[1:], "experiment=base", "output_dir=base", "wandb.enabled=false",
                        "hydra.sweep.dir=mr"]],
    }


WRITES = {"verifierbench": "vb/config.json", "grpo": "grpo/wandb", "sft": "sft/config.json",
          "grpo_sweep": "mr/multirun.yaml", "score": "score/metrics.json"}


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("case", ["judge", "score", "verifierbench", "proverbench", "tcs", "proofjudge", "ineqmath",
                                  "selection", "augment", "candidates", "curate", "sft", "grpo", "grpo_sweep"])
def test_no_api_key_in_any_file_a_command_writes(case, vllm_server, inputs, tiny_model, tmp_path):
    for args in _commands(vllm_server, inputs, tiny_model)[case]:
        run_cmd(tmp_path, args)
    if case in WRITES:  # the file that used to carry the key was written, and searched
        assert (tmp_path / WRITES[case]).exists()
    assert leaks(tmp_path) == []


@pytest.mark.vllm
@pytest.mark.slow
def test_serve_keeps_its_key_out_of_logs_and_files(tiny_model, tmp_path):
    """``python -m verifier.serve ... api_key=KEY``: the key authenticates, and is in no file or log."""
    import requests

    port = free_port()
    args = [sys.executable, "-m", "verifier.serve", f"model={tiny_model}", f"port={port}", f"api_key={CANARY}",
            "log_file=serve.log", "omp_num_threads=1", "kv_cache_memory_bytes=64M"]
    with open(tmp_path / "stdout.log", "wb") as log:
        proc = subprocess.Popen(args, cwd=tmp_path, env=_env(tmp_path), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while b"ready:" not in (tmp_path / "stdout.log").read_bytes():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "stdout.log").read_text()[-3000:]
            time.sleep(1)
        url = f"http://127.0.0.1:{port}/v1/models"
        assert requests.get(url, headers={"Authorization": f"Bearer {CANARY}"}, timeout=30).status_code == 200
        assert requests.get(url, headers={"Authorization": "Bearer wrong"}, timeout=30).status_code == 401
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert (tmp_path / "serve.log").stat().st_size > 0
    assert leaks(tmp_path) == []


def test_redact_and_run_names_drop_keys(tmp_path):
    """The one redaction helper on a real composed config, and the GRPO run name."""
    from training.config import GRPORunConfig
    from training.tracking import run_name
    from verifier.config import compose, redact
    from verifier.hydra_callbacks import redact_saved_config

    overrides = [f"reward.meta.endpoint.api_key={CANARY}", "grpo.beta=0.1"]
    cfg = compose("grpo", GRPORunConfig, ["experiment=meta_ver_rl", *overrides])
    cfg.overrides = overrides
    assert cfg.reward.meta.endpoint.api_key == CANARY
    red = redact(cfg)
    assert CANARY not in repr(red) and red["reward"]["meta"]["endpoint"]["api_key"] == "***"
    assert red["overrides"] == ["reward.meta.endpoint.api_key=***", "grpo.beta=0.1"] and red["grpo"]["beta"] == 0.1
    assert run_name(cfg) == "meta_ver_rl,grpo.beta=0.1"
    inline = redact([f"verifiers=[{{base_url: u, api_key: {CANARY}}}]", f"+x.api_key='{CANARY}'"])
    assert CANARY not in repr(inline)
    saved = tmp_path / "multirun.yaml"
    saved.write_text(f"reward:\n  endpoint:\n    api_key: {CANARY}\nhydra:\n  overrides:\n    task:\n"
                     f"    - reward.meta.endpoint.api_key={CANARY}\n")
    assert redact_saved_config(saved) and CANARY not in saved.read_text()


def _sweep_leaks(tmp: Path, args: list[str]) -> subprocess.CompletedProcess:
    p = run_cmd(tmp, args)
    assert b"can read it" in p.stderr and b"api_key_env=NAME" in p.stderr  # the process-list warning
    saved = sorted(str(f.relative_to(tmp)) for f in tmp.rglob("*") if f.is_file())
    assert "mr/multirun.yaml" in saved and [f for f in saved if "/.hydra/" in f], saved  # Hydra did save configs
    assert leaks(tmp) == [], leaks(tmp)
    return p


@pytest.mark.vllm
@pytest.mark.slow
def test_sweep_keeps_command_line_keys_out_of_every_saved_config(vllm_server, inputs, tmp_path):
    """A two-job ``-m`` sweep with the key on the command line (and Hydra saving every job's ``.hydra/``):
    the key authenticates, and no file (``multirun.yaml``, ``.hydra/*.yaml``, outputs) holds it."""
    _sweep_leaks(tmp_path, ["-m", "eval.judge", "-m", f"input={inputs / 'trajs.jsonl'}", "output=a.jsonl,b.jsonl",
                            *_ep(vllm_server, "endpoint"), "judge.n=1", "judge.max_tokens=8", "progress=false",
                            "hydra.sweep.dir=mr", "hydra.output_subdir=.hydra"])
    for out in ("a.jsonl", "b.jsonl"):  # both jobs judged every proof with the key
        assert len((tmp_path / out).read_text().splitlines()) == 2


@pytest.mark.vllm
@pytest.mark.slow
def test_submitit_local_launch_keeps_keys_out_of_job_pickles(vllm_server, inputs, tmp_path):
    """``hydra/launcher=submitit_local``: the jobs (own processes, started from pickles under
    ``.submitit/``) get the key through the environment; no pickle, log, W&B run or saved config holds it."""
    _sweep_leaks(tmp_path, ["-m", "eval.verifierbench", "-m", "hydra/launcher=submitit_local",
                            f"data={inputs / 'trajs.jsonl'}", "out=vb1,vb2", *_ep(vllm_server, "verifier"),
                            "judge.n=1", "judge.max_tokens=8", f"meta.endpoint.api_key={CANARY}", "bootstrap_n=20",
                            "progress=false", "wandb.enabled=true", "hydra.sweep.dir=mr",
                            "hydra.output_subdir=.hydra"])
    assert list((tmp_path / "mr" / ".submitit").rglob("*.pkl"))
    for out in ("vb1", "vb2"):
        assert (tmp_path / out / "metrics.json").exists()


@pytest.mark.vllm
def test_key_from_a_named_environment_variable(vllm_server, inputs, tmp_path):
    """``endpoint.api_key_env=NAME`` authenticates with ``$NAME``; a named variable that is not set is an
    error naming it before any work."""
    args = [sys.executable, "-m", "eval.judge", f"input={inputs / 'trajs.jsonl'}", "output=j.jsonl",
            f"endpoint.base_url={vllm_server.base_url}", f"endpoint.model={vllm_server.model_name}",
            "endpoint.api_key_env=MY_JUDGE_KEY", "judge.n=1", "judge.max_tokens=8", "progress=false"]
    p = subprocess.run(args, cwd=tmp_path, env={**_env(tmp_path), "MY_JUDGE_KEY": API_KEY}, capture_output=True,
                       timeout=600, check=False)
    assert p.returncode == 0 and b"can read it" not in p.stderr, p.stderr[-3000:]
    assert len((tmp_path / "j.jsonl").read_text().splitlines()) == 2
    p = subprocess.run([*args[:4], "output=k.jsonl", *args[5:]], cwd=tmp_path, env=_env(tmp_path),
                       capture_output=True, timeout=600, check=False)
    assert p.returncode != 0 and b"api_key_env=MY_JUDGE_KEY names an environment variable that is not set" in p.stderr
    assert not (tmp_path / "k.jsonl").exists()


def test_a_command_line_key_leaves_the_process_list(inputs, tmp_path):
    """``ps`` shows a running command without the key it was given (the title is rewritten once Hydra
    would have parsed it), and the command warns that the key was visible while it started."""
    import socket

    from verifier.outputs import read_holder

    hole = socket.socket()  # a server that never answers: the command keeps running
    hole.bind(("127.0.0.1", 0))
    hole.listen(8)
    out = tmp_path / "j.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "eval.judge", f"input={inputs / 'trajs.jsonl'}", f"output={out}",
                             f"endpoint.base_url=http://127.0.0.1:{hole.getsockname()[1]}/v1", "endpoint.model=m",
                             f"endpoint.api_key={CANARY}", "endpoint.max_retries=0", "progress=false"],
                            cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while (read_holder(out) or {}).get("pid") != proc.pid:  # running: it holds its output
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:]
            time.sleep(0.2)
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert b"eval.judge" in cmdline and b"api_key_env=VERIFIER_ARGV_KEY_1" in cmdline, cmdline
        assert CANARY.encode() not in cmdline
    finally:
        proc.kill()
        err = proc.communicate(timeout=60)[1]
        hole.close()
    assert b"every user of this machine can read it" in err and CANARY.encode() not in err
