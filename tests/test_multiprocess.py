"""Multi-process GRPO on CPU (issue 12, items 2 and 5): the cluster's launcher, only smaller.

``accelerate launch --config_file launch/accelerate/cpu_<ddp|zero2|zero3>.yaml --num_processes 2
training/grpo.py ...`` starts two real ranks (gloo): DDP, DeepSpeed ZeRO-2 and ZeRO-3, LoRA and full
fine-tuning. Every rank writes ``ranks/rank<R>.jsonl`` (training.trainer.rank_log_callback); the tests
read those to prove both ranks stepped, load the checkpoints, kill a ZeRO-3 run and resume it, and
kill the meta-verifier's vLLM server under a 2-rank run (both ranks stop with JudgeFailureError).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import API_KEY, free_port

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
ACCELERATE = str(Path(PY).parent / "accelerate")
GRADE_REGEX = r"<final_answer>\ngrade: (EXACT_MATCH|BASIC_MATCH|POOR_MATCH|WRONG_POLARITY)\n</final_answer>"
ACCEL_CONFIG = {"ddp": "launch/accelerate/cpu_ddp.yaml", "zero2": "launch/accelerate/cpu_zero2.yaml",
                "zero3": "launch/accelerate/cpu_zero3.yaml"}
DIST_TYPE = {"ddp": "MULTI_CPU", "zero2": "DEEPSPEED", "zero3": "DEEPSPEED"}

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", WANDB_MODE="offline", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               WANDB_SILENT="true", PYTHONPATH=str(REPO))
    env.pop("WANDB_API_KEY", None)
    return env


def launch_cmd(config: str, out: Path, tiny_model: Path, *overrides: str, lora: bool = False,
               evaluate: bool = False) -> list[str]:
    """The cluster command (docs/cluster.md) with a CPU accelerate file, 2 ranks and the tiny model."""
    model = ["model=tiny_lora"] if lora else []
    ev = ["eval.enabled=true", "eval.judge.n=2", "data.n_eval=4"] if evaluate else ["eval.enabled=false"]
    return [ACCELERATE, "launch", "--config_file", ACCEL_CONFIG[config], "--num_processes", "2",
            "--main_process_port", str(free_port()),
            "training/grpo.py", "experiment=smoke", f"output_dir={out}", *model, f"model.name_or_path={tiny_model}",
            *ev, "wandb.enabled=false", *overrides]


def rank_lines(out: Path) -> dict[int, list[dict]]:
    return {r: [json.loads(x) for x in (out / "ranks" / f"rank{r}.jsonl").read_text().splitlines()]
            for r in (0, 1) if (out / "ranks" / f"rank{r}.jsonl").exists()}


def assert_both_ranks_stepped(out: Path, config: str, steps: list[int], pids: set[int] | None = None) -> set[int]:
    lines = rank_lines(out)
    assert set(lines) == {0, 1}, f"per-rank logs: {sorted(lines)}"
    seen = set()
    for r, ls in lines.items():
        ls = [x for x in ls if pids is None or x["pid"] not in pids]
        assert [x["step"] for x in ls] == steps, (r, ls)
        assert all(x["rank"] == r and x["world_size"] == 2 and x["distributed_type"] == DIST_TYPE[config]
                   and x["backend"] == "gloo" for x in ls), ls
        # each rank scored its own completions (per_device_train_batch_size=4 a step)
        assert [x["completions_scored"] for x in ls][-1] >= 4 * len(steps)
        seen |= {x["pid"] for x in ls}
    assert len(seen) == 2, f"expected two processes, saw pids {seen}"
    return seen


def assert_checkpoint_loads(ck: Path, tiny_model: Path, lora: bool) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    ref = {k: v.shape for k, v in base.state_dict().items()}
    if lora:
        from peft import PeftModel

        assert (ck / "adapter_config.json").exists(), sorted(p.name for p in ck.iterdir())
        model = PeftModel.from_pretrained(base, ck)
        lora_w = {k: v for k, v in model.state_dict().items() if "lora_" in k}
        assert lora_w and all(v.numel() > 0 for v in lora_w.values())
    else:
        model = AutoModelForCausalLM.from_pretrained(ck)
        got = {k: v.shape for k, v in model.state_dict().items()}
        assert got == ref  # ZeRO-3: the gathered 16-bit weights, not empty shards
    tok = AutoTokenizer.from_pretrained(tiny_model)
    with torch.no_grad():
        logits = model(**tok("1 + 1 = 2", return_tensors="pt")).logits
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize(("config", "lora"), [("ddp", False), ("ddp", True), ("zero2", False), ("zero2", True),
                                              ("zero3", True)])
def test_two_ranks_train_and_checkpoint(tmp_path, tiny_model, config, lora):
    """(ZeRO-3 full fine-tuning is the kill-and-resume test below.)"""
    out = tmp_path / "run"
    evaluate = config == "zero3"  # issue 12.3: a sharded run ends with the held-out VerifierBench on DIR/final
    cmd = launch_cmd(config, out, tiny_model, "grpo.max_steps=2", "grpo.save_steps=2", lora=lora, evaluate=evaluate)
    p = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=1500, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert_both_ranks_stepped(out, config, [1, 2])
    assert (out / "checkpoint-2" / "trainer_state.json").exists()
    assert_checkpoint_loads(out / "checkpoint-2", tiny_model, lora)
    assert_checkpoint_loads(out / "final", tiny_model, lora)
    if evaluate:  # judged by vLLM on the gathered checkpoint, once (main process), 4 records x 2 passes
        rows = [json.loads(x) for x in (out / "heldout" / "judgments.jsonl").read_text().splitlines()]
        assert len(rows) == 4 and all(len(r["passes"]) == 2 for r in rows), rows
        m = json.loads((out / "metrics.json").read_text())
        assert m["heldout"]["model"].endswith("final_merged" if lora else "final")
        assert "rough.balanced_f1" in json.dumps(m)


def _wait(cond, proc: subprocess.Popen, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(f"launcher exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_zero3_two_ranks_killed_and_resumed(tmp_path, tiny_model):
    out = tmp_path / "z3"
    args = ["grpo.max_steps=6", "grpo.save_steps=2"]
    log1 = open(tmp_path / "first.log", "w")  # noqa: SIM115 - the child writes it while we poll
    proc = subprocess.Popen(launch_cmd("zero3", out, tiny_model, *args), cwd=REPO, env=_env(), stdout=log1,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait(lambda: (out / "checkpoint-2" / "trainer_state.json").exists(), proc, 1200, "checkpoint-2")
    finally:
        # a node lost: SIGKILL the ranks (torchrun starts them in their own sessions, so killing the
        # launcher's process group alone leaves them training) and the launcher
        first_pids = {x["pid"] for ls in rank_lines(out).values() for x in ls}
        for pid in first_pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # our own process group
        proc.wait(60)
    assert len(first_pids) == 2
    deadline = time.monotonic() + 60
    while any(_alive(p) for p in first_pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(_alive(p) for p in first_pids)
    done = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if (p / "trainer_state.json").exists())
    assert done and max(done) < 6, "training finished before it could be killed"
    assert not (out / "final").exists()
    last = max(done)

    p = subprocess.run(launch_cmd("zero3", out, tiny_model, *args, "resume=true"), cwd=REPO, env=_env(),
                       capture_output=True, text=True, timeout=1500, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert f"resuming from checkpoint checkpoint-{last}" in p.stdout + p.stderr
    # both ranks of the second run continued after the checkpoint, up to the last step
    assert_both_ranks_stepped(out, "zero3", list(range(last + 1, 7)), pids=first_pids)
    state = json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["global_step"] == 6
    assert_checkpoint_loads(out / "checkpoint-6", tiny_model, lora=False)
    assert_checkpoint_loads(out / "final", tiny_model, lora=False)


def test_meta_verifier_outage_stops_both_ranks(tmp_path, tiny_model):
    """Kill the meta-verifier's vLLM server mid-run: both ranks end, bounded, with JudgeFailureError."""
    from verifier.serve import ServeConfig, VLLMServer

    server = VLLMServer(ServeConfig(model=str(tiny_model), port=free_port(), api_key=API_KEY,
                                    served_model_name="meta-verifier", log_file=str(tmp_path / "meta.log"),
                                    omp_num_threads=1, max_num_seqs=32, startup_timeout_s=1200)).start()
    out = tmp_path / "outage"
    extra_body = "{structured_outputs: {regex: '" + GRADE_REGEX + "'}}"
    cmd = launch_cmd("ddp", out, tiny_model, "grpo.max_steps=50", "grpo.save_steps=100",
                     "reward.meta.kind=llm", "reward.format_gate=false", "reward.meta.max_tokens=48",
                     f"reward.meta.endpoint.base_url={server.base_url}", "reward.meta.endpoint.model=meta-verifier",
                     "reward.meta.endpoint.max_retries=1", "reward.meta.endpoint.timeout_s=30",
                     f"reward.meta.endpoint.extra_body={extra_body}")
    env = _env() | {"VERIFIER_API_KEY": API_KEY}
    log = open(tmp_path / "train.log", "w")  # noqa: SIM115 - the child writes it while we poll
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        try:
            _wait(lambda: all(len(v) >= 1 for v in rank_lines(out).values()) and len(rank_lines(out)) == 2,
                  proc, 1200, "both ranks logged a step with the judge up")
        finally:
            server.stop()  # the outage
        t0 = time.monotonic()
        try:
            rc = proc.wait(300)
        except subprocess.TimeoutExpired:
            raise AssertionError("training still running 300 s after the meta-verifier went down") from None
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        server.stop()
    text = (tmp_path / "train.log").read_text()
    assert rc != 0
    # JudgeFailureError is a user error (verifier.errors): one message per rank, exit 2; raised on both ranks,
    # not a hang on one
    assert text.count("meta-verifier calls failed in this step") >= 2, text[-4000:]
    assert "meta-verifier calls failed in this step" in text and "reward.meta.endpoint.base_url" in text
    pids = {x["pid"] for ls in rank_lines(out).values() for x in ls}
    assert len(pids) == 2 and not any(_alive(p) for p in pids), "a rank outlived the launcher"
    assert max(len(v) for v in rank_lines(out).values()) < 50
    print(f"both ranks stopped {took:.1f} s after the outage")


def _one_rank_step(out: str) -> None:
    """One meta-reward call on a 2-rank gloo group, then the next collective (as GRPO's gather is).

    Rank 0's judge is a real endpoint that refuses connections (nothing listens on its port); rank 1's
    is the rule-based judge, which never fails. Writes what happened on this rank to ``out/rank<R>.txt``.
    """
    import asyncio
    from datetime import timedelta

    import torch.distributed as dist

    from data_pipeline.synthetic_recipes import grpo_step_batch
    from training.rewards import JudgeFailureError, MetaReward
    from verifier.config import EndpointConfig

    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    if rank == 0:
        ep = EndpointConfig(base_url=f"http://127.0.0.1:{free_port()}/v1", api_key="k", model="m", max_retries=0,
                            timeout_s=5)
        reward = MetaReward(judge="llm", endpoint=ep, judge_max_tokens=8)
    else:
        reward = MetaReward(judge="rule")
    completions, cols = grpo_step_batch(8, 4)
    try:
        asyncio.run(reward(completions=completions, **cols))
        dist.barrier()
        result = "stepped"
    except JudgeFailureError as e:
        result = f"JudgeFailureError: {e}"
    except Exception as e:  # noqa: BLE001 - the test reports whatever else ended this rank
        result = f"{type(e).__name__}: {e}"
    Path(out, f"rank{rank}.txt").write_text(result)


def test_judge_failure_on_one_rank_stops_every_rank(tmp_path):
    """A JudgeFailureError decided on one rank is raised on every rank in the same step."""
    port = str(free_port())
    code = "import sys; from tests.test_multiprocess import _one_rank_step; _one_rank_step(sys.argv[1])"
    procs = [subprocess.Popen([PY, "-c", code, str(tmp_path)], cwd=REPO,
                              env=_env() | {"RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                            "MASTER_PORT": port}) for r in (0, 1)]
    try:
        for p in procs:
            p.wait(300)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    got = {r: (tmp_path / f"rank{r}.txt").read_text() for r in (0, 1) if (tmp_path / f"rank{r}.txt").exists()}
    assert set(got) == {0, 1}, got
    # rank 1's own judge never failed: without the collective decision it would have gone on to the
    # next collective and waited there for rank 0, which had stopped
    assert got[1].startswith("JudgeFailureError"), got
    assert got[0].startswith("JudgeFailureError: 8 of 8 meta-verifier calls failed in this step on this rank")
    assert got[1].startswith("JudgeFailureError: 0 of 8 meta-verifier calls failed in this step on this rank "
                             "(8 of 16 on all 2 ranks, 1 over the limit)"), got[1]
