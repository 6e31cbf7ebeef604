"""Errors, not tracebacks (issue 26 item 4): a user error ends a real command with one message and exit 2.

Each case runs a real command in a subprocess (they import torch: a few seconds each, so few of them);
``HYDRA_FULL_ERROR=1`` brings the traceback back. Records without ``problem_id`` get the id derived from
their problem text, said once.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import API_KEY

from verifier.formats import load_proofbench_problems
from verifier.identity import problem_id_of
from data_pipeline.synthetic import generate_synthetic
from verifier.errors import EXIT_USER_ERROR, InputError, UserError
from verifier.io import DatasetError, load_trajectories, write_jsonl

REPO = Path(__file__).resolve().parents[1]


def run(args: list[str], env: dict[str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    e.update(env or {})
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env=e, check=False)


def assert_one_message(r: subprocess.CompletedProcess, prog: str, *names: str) -> str:
    """Exit 2, no traceback, the message on one line that starts with the command and names each of ``names``."""
    assert r.returncode == EXIT_USER_ERROR, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr + r.stdout, r.stderr[-3000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith(f"{prog}: error: ")]
    assert len(lines) == 1, r.stderr[-3000:]
    for n in names:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cli_errors")
    good = [t.to_dict() for t in generate_synthetic(4, seed=3)]
    bad = [dict(good[0]), {k: v for k, v in good[1].items() if k != "proof_steps"}]
    write_jsonl(d / "bad.jsonl", bad)
    (d / "big_model").mkdir()
    (d / "big_model" / "config.json").write_text(json.dumps({  # a 7B-sized architecture (only config.json is read)
        "model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
        "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4}))
    return {"dir": d, "bad": d / "bad.jsonl", "bad_id": bad[1]["id"], "big_model": d / "big_model"}


CASES = {
    # error kind: (argv, command name, names the message must carry)
    "bad_record": (["-m", "data_pipeline.splits", "input={bad}", "out={dir}/s"], "data_pipeline.splits",
                   ["bad.jsonl", "record '{bad_id}'", "field 'proof_steps'"]),
    "missing_file": (["-m", "data_pipeline.curate", "input={dir}/nope.jsonl", "out={dir}/c"], "data_pipeline.curate",
                     ["nope.jsonl", "No such file"]),
    "bad_value": (["-m", "data_pipeline.curate", "input={dir}/x.jsonl", "out={dir}/c",
                   "classifier.endpoint.max_concurrency=0"], "data_pipeline.curate", ["max_concurrency", "got 0"]),
    "toy_scale": (["training/grpo.py", "model.name_or_path={big_model}", "output_dir={dir}/g"], "training/grpo.py",
                  ["is not the tiny model", "data.n_train=", "profile=cluster"]),
}


@pytest.mark.parametrize("kind", list(CASES))
def test_user_error_is_one_message_exit_2(kind, files):
    argv, prog, names = CASES[kind]
    fmt = {k: str(v) for k, v in files.items()}
    r = run([a.format(**fmt) for a in argv])
    assert_one_message(r, prog, *[n.format(**fmt) for n in names])
    assert not (files["dir"] / "g").exists()  # the scale check stops grpo before it writes anything


@pytest.mark.parametrize("argv", [["-m", "eval.verifierbench"], ["-m", "data_pipeline.selection"],
                                  ["training/grpo.py"], ["-m", "verifier.serve"]])
def test_unknown_key_is_hydras_message_exit_2(argv):
    r = run([*argv, "no_such_key=1"])
    assert r.returncode == EXIT_USER_ERROR, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr and "Could not override 'no_such_key'" in r.stderr, r.stderr[-3000:]


def test_full_error_shows_the_traceback(files):
    r = run(["-m", "data_pipeline.curate", f"input={files['dir']}/nope.jsonl", f"out={files['dir']}/c"],
            env={"HYDRA_FULL_ERROR": "1"})
    assert r.returncode == EXIT_USER_ERROR and "Traceback" in r.stderr and "FileNotFoundError" in r.stderr, r.stderr
    r = run(["-m", "data_pipeline.curate", "no_such_key=1"], env={"HYDRA_FULL_ERROR": "1"})
    assert r.returncode == EXIT_USER_ERROR and "Traceback" in r.stderr and "no_such_key" in r.stderr, r.stderr


def test_budget_that_cannot_fit(vllm_server, files):
    """``judge.max_tokens`` beyond the served context: one BudgetError message before any request."""
    rows = [t.to_dict() for t in generate_synthetic(2, seed=4)]
    write_jsonl(files["dir"] / "judge_in.jsonl", rows)
    out = files["dir"] / "judge_out.jsonl"
    r = run(["-m", "eval.judge", f"input={files['dir'] / 'judge_in.jsonl'}", f"output={out}",
             f"endpoint.base_url={vllm_server.base_url}", f"endpoint.model={vllm_server.model_name}",
             "judge.n=1", "judge.max_tokens=1000000", "progress=false"],
            env={"VERIFIER_API_KEY": API_KEY})
    assert_one_message(r, "eval.judge", "judge.max_tokens=1000000", "max_model_len=")
    assert not out.exists() or out.read_text() == ""


def test_error_classes_are_user_errors():
    """The base class other branches subclass (e.g. an output lock held by another process)."""
    from training.rewards import JudgeFailureError
    from training.scale import ToyScaleError
    from verifier.budget import BudgetError
    from verifier.records import RecordError

    for cls in (RecordError, DatasetError, BudgetError, ToyScaleError, JudgeFailureError, InputError):
        assert issubclass(cls, UserError), cls
    assert issubclass(InputError, ValueError) and issubclass(BudgetError, ValueError)  # old `except ValueError` still work


def test_every_hydra_app_goes_through_hydra_main():
    """One mechanism: no command declares its own ``@hydra.main`` (it would bypass the error handling)."""
    own = [str(p.relative_to(REPO)) for d in ("verifier", "eval", "data_pipeline", "training", "launch")
           for p in (REPO / d).rglob("*.py")
           if re.search(r"@hydra\.main\(|hydra\.main\(", p.read_text(encoding="utf-8")) and p.name != "config.py"]
    assert own == []


def test_missing_problem_id_is_derived_and_said_once(files, caplog):
    rows = [t.to_dict() for t in generate_synthetic(4, seed=5)]
    for r in rows[:3]:
        del r["problem_id"]
    write_jsonl(files["dir"] / "nopid.jsonl", rows)
    with caplog.at_level("WARNING", logger="verifier.io"):
        res = load_trajectories(files["dir"] / "nopid.jsonl")
    assert res.derived_problem_ids == 3 and "derived_problem_ids=3" in res.summary()
    assert [t.problem_id for t in res.records[:3]] == [problem_id_of(r["problem"]) for r in rows[:3]]
    assert res.records[3].problem_id == rows[3]["problem_id"]
    assert [r.getMessage() for r in caplog.records].count(
        f"{files['dir'] / 'nopid.jsonl'}: 3 record(s) without problem_id: derived from the problem text "
        "(verifier.identity.problem_id_of, the id the leak checks use)") == 1
    # problems files too (curate, candidates, proverbench read them)
    write_jsonl(files["dir"] / "problems.jsonl", [{"problem": "Prove that 1 < 2."}, {"id": "p", "problem": "Prove x."}])
    ps = load_proofbench_problems(files["dir"] / "problems.jsonl")
    assert [p.id for p in ps] == [problem_id_of("Prove that 1 < 2."), "p"]
    # through a real command: the split runs, and says it once
    r = run(["-m", "data_pipeline.splits", f"input={files['dir'] / 'nopid.jsonl'}", f"out={files['dir'] / 'sp'}",
             "held_out_size=1"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stderr.count("3 record(s) without problem_id: derived from the problem text") == 1, r.stderr
