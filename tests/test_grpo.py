"""GRPO training (training/grpo.py): accelerate smoke run, W&B offline, LLM meta reward, resume after kill."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
ACCELERATE = str(Path(PY).parent / "accelerate")
GRADE_REGEX = r"<final_answer>\ngrade: (EXACT_MATCH|BASIC_MATCH|POOR_MATCH|WRONG_POLARITY)\n</final_answer>"


def _env():
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", WANDB_MODE="offline", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               WANDB_SILENT="true")
    env.pop("WANDB_API_KEY", None)
    return env


def _tiny(tiny_model) -> list[str]:
    return [f"model.name_or_path={tiny_model}"]


def test_smoke_accelerate_launch_writes_checkpoint_metrics_and_offline_wandb(tmp_path, tiny_model):
    out = tmp_path / "smoke"
    # the contract command; on a cluster add --config_file launch/accelerate/<zero2|zero3|...>.yaml
    cmd = [ACCELERATE, "launch", "training/grpo.py", "experiment=smoke", f"output_dir={out}", *_tiny(tiny_model)]
    p = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    # checkpoints every 2 steps, complete
    for step in (2, 4):
        assert (out / f"checkpoint-{step}" / "trainer_state.json").exists()
    assert (out / "final" / "config.json").exists()
    # per-step reward logging
    hist = json.loads((out / "train_log.json").read_text())
    steps = [h for h in hist if "rewards/meta/mean" in h]
    assert len(steps) == 4
    for key in ("meta/judge_latency_s", "meta/batch_parse_failure_rate", "meta/grade_frac/UNPARSEABLE",
                "rewards/rough_reward/mean", "rewards/format_reward/mean", "rough/parse_failure_rate"):
        assert key in steps[0], key
    # held-out metrics in the eval.score layout
    m = json.loads((out / "metrics.json").read_text())
    for key in ("rough.tpr", "rough.tnr", "rough.balanced_f1", "meta.balanced_f1"):
        assert "value" in m[key] and "ci" in m[key]
    assert m["n"] == 8 and m["run"]["train"]["global_step"] == 4
    assert m["run"]["train"]["meta_reward"]["completions"] == 4 * 4
    # offline W&B run with the config and the completions table (meta-verifier grade + rationale)
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    tables = list(runs[0].glob("files/media/table/completions_*.table.json"))
    assert tables, "no completions table logged to W&B"
    cols = json.loads(tables[0].read_text())["columns"]
    assert "meta_grade" in cols and "meta_rationale" in cols
    log = next(runs[0].glob("run-*.wandb")).read_bytes()  # config and run name are in the offline run log
    assert b"experiment_name" in log and b"smoke" in log
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["experiment_name"] == "smoke" and cfg["grpo"]["max_steps"] == 4


def test_llm_meta_reward_for_a_few_grpo_steps(tmp_path, tiny_model, endpoint):
    """Meta-Ver-RL with the LLM meta-verifier on the session vLLM server (grades forced to the B.3 format)."""
    from training.grpo import GRPORunConfig, run
    from verifier.config import compose

    cfg = compose("grpo", GRPORunConfig, ["experiment=smoke", f"output_dir={tmp_path / 'llm'}",
                                          *_tiny(tiny_model), "grpo.max_steps=2", "grpo.save_steps=2",
                                          "reward.meta_judge=llm", "reward.format_gate=false",
                                          "reward.judge_max_tokens=48", "eval.enabled=false", "wandb.enabled=false"])
    cfg.reward.endpoint = dataclasses.replace(endpoint, extra_body={"structured_outputs": {"regex": GRADE_REGEX}})
    run(cfg)
    hist = json.loads((tmp_path / "llm" / "train_log.json").read_text())
    steps = [h for h in hist if "meta/judge_latency_s" in h]
    assert len(steps) == 2
    assert all(h["meta/judge_latency_s"] > 0 and h["meta/judge_failures"] == 0 for h in steps)
    grades = sum(h[f"meta/grade_frac/{g}"] for g in ("EXACT_MATCH", "BASIC_MATCH", "POOR_MATCH", "WRONG_POLARITY")
                 for h in steps)
    assert grades == pytest.approx(2.0)  # every completion got one of the four grades from the LLM
    summary = json.loads((tmp_path / "llm" / "train_summary.json").read_text())  # written with eval off too
    assert summary["experiment"] == "smoke" and "train" in summary
    import pandas as pd

    table = pd.read_parquet(sorted((tmp_path / "llm" / "completions").glob("*.parquet"))[-1])
    assert set(table["meta_grade"]) <= {"EXACT_MATCH", "BASIC_MATCH", "POOR_MATCH", "WRONG_POLARITY"}


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"training exited ({proc.returncode}) before writing {path}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {path}")
        time.sleep(0.5)


@pytest.mark.slow
def test_killed_training_resumes_from_last_checkpoint(tmp_path, tiny_model):
    out = tmp_path / "resume"
    args = [PY, "training/grpo.py", "experiment=smoke", f"output_dir={out}", *_tiny(tiny_model),
            "grpo.max_steps=6", "grpo.save_steps=2", "eval.enabled=false"]
    log1 = open(tmp_path / "first.log", "w")
    proc = subprocess.Popen(args, cwd=REPO, env=_env(), stdout=log1, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for(out / "checkpoint-2" / "trainer_state.json", proc, 600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # our own process group only
        proc.wait(30)
    assert proc.returncode != 0, "training finished before it could be killed"
    assert not (out / "final").exists()
    done = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if (p / "trainer_state.json").exists())
    assert done and max(done) < 6
    expected = f"checkpoint-{max(done)}"

    p = subprocess.run(args + ["resume=true"], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert f"resuming from checkpoint {expected}" in p.stdout + p.stderr
    assert f"resuming from checkpoint {expected}" in (out / "resume.log").read_text()
    state = json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["global_step"] == 6
    assert (out / "final" / "config.json").exists()
    # the resumed run continued where the first stopped: its log starts after the checkpoint step
    hist = json.loads((out / "train_log.json").read_text())
    assert [h["step"] for h in hist if "rewards/meta/mean" in h][-1] == 6
    # the same W&B run id is continued
    run_ids = {p.name.split("-")[-1] for p in (out / "wandb").glob("offline-run-*")}
    assert run_ids == {(out / "wandb_run_id.txt").read_text().strip()}


def test_resume_without_checkpoint_says_so(tmp_path):
    from training.grpo import last_checkpoint

    assert last_checkpoint(tmp_path) is None
    (tmp_path / "checkpoint-4").mkdir()  # half-written: no trainer_state.json
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text("{}")
    assert last_checkpoint(tmp_path).name == "checkpoint-2"


def test_configs_compose_for_every_experiment_and_model():
    from training.grpo import GRPORunConfig
    from verifier.config import compose

    ladder = ["base", "rough_rl", "meta_ver_rl", "extra_ann", "pos_aug", "pess_ver", "smoke"]
    cfgs = {e: compose("grpo", GRPORunConfig, [f"experiment={e}"]) for e in ladder}
    assert cfgs["base"].train is False
    assert cfgs["rough_rl"].reward.components == {"rough": 1.0, "meta": 0.0}
    assert cfgs["meta_ver_rl"].reward.components["meta"] == 1.0
    assert cfgs["pess_ver"].eval.n_passes == 8 and cfgs["pess_ver"].eval.aggregation == "pessimistic"
    assert cfgs["extra_ann"].data.synthetic["valid_fraction"] < cfgs["pos_aug"].data.synthetic["valid_fraction"]
    assert cfgs["smoke"].output_dir == "runs/grpo/smoke"
    for m in ("tiny", "tiny_lora", "qwen3_8b", "qwen3_8b_full", "qwen3_30b_a3b", "qwen3_30b_a3b_full"):
        c = compose("grpo", GRPORunConfig, [f"model={m}", "experiment=meta_ver_rl"])
        assert c.model.name_or_path and c.experiment_name == "meta_ver_rl"
    assert compose("grpo", GRPORunConfig, ["model=qwen3_30b_a3b"]).model.lora.enabled
    assert not compose("grpo", GRPORunConfig, ["model=qwen3_8b_full"]).model.lora.enabled


def test_lora_grpo_step_in_process(tmp_path, tiny_model):
    """The PEFT LoRA path: one GRPO step, adapter merged for the held-out evaluation."""
    from training.grpo import GRPORunConfig, run
    from verifier.config import compose

    cfg = compose("grpo", GRPORunConfig, ["experiment=smoke", "model=tiny_lora", f"output_dir={tmp_path / 'lora'}",
                                          *_tiny(tiny_model), "grpo.max_steps=1", "grpo.save_steps=1",
                                          "data.n_eval=4", "wandb.enabled=false"])
    m = run(cfg)
    assert (tmp_path / "lora" / "final" / "adapter_config.json").exists()
    assert m["n"] == 4 and "meta.balanced_f1" in m


@pytest.mark.slow
def test_table3_sweep_and_ablation_report(tmp_path, tiny_model):
    """`python training/grpo.py -m experiment=...` over the whole ladder, then `python -m eval.report`."""
    ladder = "base,rough_rl,meta_ver_rl,extra_ann,pos_aug,pess_ver"
    root = tmp_path / "sweep"
    cmd = [PY, "training/grpo.py", "-m", f"experiment={ladder}", f"output_dir={root}/${{experiment_name}}",
           *_tiny(tiny_model), "grpo.max_steps=1", "grpo.per_device_train_batch_size=4", "grpo.num_generations=4",
           "grpo.max_completion_length=8", "grpo.save_steps=1", "data.n_train=8", "data.n_eval=6",
           "eval.max_new_tokens=8", "eval.bootstrap_n=50", "wandb.enabled=false", f"hydra.sweep.dir={tmp_path}/mr"]
    p = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    names = ladder.split(",")
    for n in names:
        m = json.loads((root / n / "metrics.json").read_text())
        assert m["run"]["experiment"] == n and "meta.balanced_f1" in m
        assert ("train" in m["run"]) == (n != "base")
    assert json.loads((root / "pess_ver" / "metrics.json").read_text())["eval_config"]["n_passes"] == 8
    rep = subprocess.run([PY, "-m", "eval.report", f"runs=[{root}]", f"out={tmp_path / 'report'}", "base=base"],
                         cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stdout[-3000:] + rep.stderr[-3000:]
    md = (tmp_path / "report" / "ablation.md").read_text()
    for n in names:
        assert n in md


@pytest.mark.slow
def test_submitit_local_launcher_runs_a_job(tmp_path, tiny_model):
    """The submitit launcher config (configs/hydra/launcher/slurm*.yaml) on local processes: one eval-only job."""
    out = tmp_path / "base"
    cmd = [PY, "training/grpo.py", "-m", "hydra/launcher=slurm_local", "experiment=base", f"output_dir={out}",
           *_tiny(tiny_model), "data.n_eval=4", "eval.max_new_tokens=8", "eval.bootstrap_n=20",
           "wandb.enabled=false", f"hydra.sweep.dir={tmp_path / 'mr'}"]
    p = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert json.loads((out / "metrics.json").read_text())["run"]["experiment"] == "base"
    logs = list((tmp_path / "mr" / ".submitit").glob("*/*_log.out"))
    assert logs  # ran as a submitit job, which started the run through accelerate with the profile's file
    job_log = logs[0].read_text()
    assert re.search(r"submitit job: \S*accelerate launch --config_file \S*launch/accelerate/cpu\.yaml ", job_log), job_log
    assert "training/grpo.py experiment=base" in job_log
