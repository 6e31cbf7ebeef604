"""`make bench-real` (bench/bench_real.py) on the tiny model at toy sizes: every stage runs (conversion aside: the tiny
model is given), the bench resumes after a kill half-way without redoing a finished stage, the last line keeps its
keys, and a bad option is one error before any work. SmolLM2 itself is the benchmark, never a test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_real import LAST_LINE_KEYS, parse_options  # noqa: E402
from training.diagnostics import mixed_share  # noqa: E402
from verifier.errors import InputError  # noqa: E402

TOY = ["n_sft=16", "sft_steps=2", "sft_batch=4", "n_grpo=8", "n_eval=40", "grpo_steps=1", "grpo_batch=4",
       "num_generations=2", "max_completion_length=24", "eval_max_tokens=24", "eval_passes=1", "n_processbench=2",
       "bootstrap_n=20", "lora_r=4", "lora_alpha=8", "kv_cache=128M"]


def test_bad_options_are_one_error_before_work(tmp_path):
    for argv, what in ((["grpo_batch=12"], "grpo_batch=12"), (["eval_max_tokens=64"], "eval_max_tokens=64"),
                       (["sft_steps=0"], "sft_steps=0"), ([f"model={tmp_path}"], "not a model folder")):
        with pytest.raises(InputError, match=what) as e:
            parse_options(argv)
        assert "\n" not in str(e.value)


def test_mixed_share_counts_records_whose_passes_differ(tmp_path):
    """A record whose passes earn different meta rewards is a GRPO group with a gradient; alike passes are not."""
    from verifier.aggregate import AggregationPolicy, aggregate
    from verifier.io import write_jsonl
    from verifier.judgment import Judgment
    from verifier.parser import format_verification, parse_verification
    from verifier.records import Annotation, ProofTrajectory

    def traj(i: int, bad_step: int) -> ProofTrajectory:
        return ProofTrajectory(f"t{i}", f"p{i}", "Compute 1 + 1.", ("1 + 1 = 2", "So the answer is 2."),
                               annotation=Annotation(first_fatal_error_step=bad_step))

    def judgment(rid: str, *outs: tuple[str, int]) -> dict:
        ps = [parse_verification(format_verification(v, s, "x")) for v, s in outs]
        return Judgment(rid, aggregate(ps, AggregationPolicy(n=len(ps))), ps, n=len(ps)).to_row()

    gold = [traj(0, -1), traj(1, 0), traj(2, 0)]
    path = tmp_path / "judgments.jsonl"
    write_jsonl(path, [judgment("t0", ("valid", -1), ("valid", -1)),  # both right: alike
                       judgment("t1", ("invalid", 0), ("valid", -1)),  # right and wrong: mixed
                       judgment("t2", ("valid", -1), ("valid", -1))])  # both wrong: alike
    assert mixed_share(gold, path) == pytest.approx(1 / 3)


@pytest.mark.slow
@pytest.mark.vllm
def test_the_bench_resumes_after_a_kill_and_prints_its_line(tiny_model, tmp_path):
    out = tmp_path / "real"
    argv = [sys.executable, str(REPO / "bench" / "bench_real.py"), f"out={out}", f"model={tiny_model}", *TOY]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    marker = out / "sft" / "bench_done.json"
    deadline = time.monotonic() + 600
    while not marker.is_file():
        assert p.poll() is None and time.monotonic() < deadline, "the bench ended before its SFT stage finished"
        time.sleep(0.2)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert not (out / "report.md").exists()
    done = {d: (out / d / "bench_done.json").stat().st_mtime_ns for d in ("before/synthetic", "before/processbench",
                                                                          "sft")}
    r = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for d in done:
        assert f"[bench-real] {d}: resumed" in r.stdout, r.stdout[-2000:]
        assert (out / d / "bench_done.json").stat().st_mtime_ns == done[d]  # not redone
    last = r.stdout.strip().splitlines()[-1]
    assert [kv.split("=")[0] for kv in last.split()] == list(LAST_LINE_KEYS), last
    md = (out / "report.md").read_text()
    for row in ("| synthetic | before |", "| synthetic | grpo |", "| processbench | sft |", "synthetic:grpo-sft"):
        assert row in md, md
    assert (out / "real.png").stat().st_size > 10_000
    assert (out / "grpo" / "synthetic" / "final" / "adapter_config.json").is_file()  # GRPO trained a LoRA adapter
    # the adapter served by verifier.serve (base + LoRA, lora=true) and judged through the endpoint
    served = json.loads((out / "report.json").read_text())["served"]
    assert served["n"] == len((out / "held_out.jsonl").read_text().splitlines()) and served["parse_rate"] is not None
    assert 0.0 <= served["same_decision"] <= 1.0 and "served by `verifier.serve`" in md
    cfg = json.loads((out / "served" / "synthetic" / "config.json").read_text())
    assert cfg["eval"]["engine"] == "endpoint" and cfg["eval"]["endpoint"]["model"] == "verifier", cfg["eval"]


def test_the_documented_last_line_is_the_contract():
    """The issue's last line, exactly: the keys the bench prints, in order, as docs/training.md shows them."""
    contract = ("parse_rate_before=<r> parse_rate_after=<r> rough_f1_before=<r> rough_f1_after=<r> rough_f1_ci_low=<r> "
                "grpo_reward_delta=<r> grpo_delta_ci_low=<r>")
    assert " ".join(f"{k}=<r>" for k in LAST_LINE_KEYS) == contract
    assert contract in (REPO / "docs" / "training.md").read_text()
