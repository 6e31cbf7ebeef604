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


@pytest.mark.vllm
def test_smoke_accelerate_launch_writes_checkpoint_metrics_and_offline_wandb(tmp_path, tiny_model):
    out = tmp_path / "smoke"
    # the contract command; on a cluster add --config_file launch/accelerate/<zero2|zero3|...>.yaml
    cmd = [ACCELERATE, "launch", "training/grpo.py", "experiment=smoke", f"output_dir={out}", *_tiny(tiny_model),
           "grpo.kl_to_init_samples=2"]
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
                "rewards/rough_reward/mean", "rewards/format_reward/mean", "rough/parse_failure_rate",
                "phase/generation_s", "phase/reward_s", "phase/backward_s", "phase/step_s",
                # the GRPO diagnosis (issue 23 item 1): truncation read as in evaluation, KL to the warm start at beta 0
                "completions/truncated_frac", "completions/unparseable_frac", "frac_reward_zero_std",
                "completions/mean_length", "kl_to_init"):
        assert key in steps[0], key
    assert all(h["kl_to_init"] >= 0 for h in steps)
    # the tiny random policy never emits EOS in its budget: every completion is truncated, as evaluation says,
    # and earns no reward (so no advantage, no update: kl_to_init stays 0; tests/test_diagnostics.py moves it)
    assert all(h["completions/truncated_frac"] == h["completions/clipped_ratio"] == 1.0 for h in steps)
    assert all(h["rewards/meta/mean"] == 0 and h["rewards/format_reward/mean"] == 0 for h in steps)
    # ... so every step's gradient is exactly zero and the optimizer leaves the policy alone (training.skip_steps)
    assert [h["optim/step_skipped"] for h in steps] == [1.0] * 4 and steps[-1]["optim/skipped_steps"] == 4
    assert all(h["kl_to_init"] == 0 for h in steps)
    # held-out metrics in the eval.score layout, from VerifierBench on DIR/final
    m = json.loads((out / "metrics.json").read_text())
    assert m["heldout"]["model"] == str(out / "final")
    assert len((out / "heldout" / "judgments.jsonl").read_text().splitlines()) == 8
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
    assert b"phase/generation_s" in log and b"phase/weight_sync_s" in log  # step phase times reach W&B
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["experiment_name"] == "smoke" and cfg["grpo"]["max_steps"] == 4


@pytest.mark.vllm
def test_heldout_evaluation_is_verifierbench_on_the_saved_checkpoint(tmp_path, tiny_model):
    """One evaluation path: GRPO saves DIR/final, then eval.verifierbench judges it with vllm.LLM offline.

    The held-out judgments (n passes per held-out row) are under the run, written by the
    VerifierBench path, and the run's metrics.json equals ``eval.score`` on those judgments.
    """
    from eval.score import ScoreConfig
    from eval.score import run as score
    from eval.stats import BootstrapSpec
    from training.config import GRPORunConfig
    from training.grpo import run
    from verifier.config import compose
    from verifier.io import read_jsonl

    out = tmp_path / "run"
    cfg = compose("grpo", GRPORunConfig, ["experiment=smoke", f"output_dir={out}", *_tiny(tiny_model),
                                          "grpo.max_steps=1", "grpo.save_steps=1", "data.n_eval=5",
                                          "eval.judge.n=3", "eval.judge.max_tokens=12", "eval.bootstrap.n=100",
                                          "eval.offline.kv_cache_memory_bytes=64M", "eval.progress=false",
                                          "wandb.enabled=false"])
    m = run(cfg)
    final = out / "final"
    assert (final / "config.json").exists() and (final / "tokenizer_config.json").exists()
    rows = read_jsonl(out / "heldout" / "judgments.jsonl")
    held = read_jsonl(out / "heldout" / "held_out.jsonl")
    assert len(rows) == len(held) == 5 and {r["id"] for r in rows} == {h["id"] for h in held}
    assert all(len(r["passes"]) == 3 and r["model"] == str(final) for r in rows)  # the trained checkpoint judged
    assert all("meta_grade" in r for r in rows)  # graded by the reward's (rule) meta-verifier
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["heldout"]["engine"] == "offline" and saved["heldout"]["model"] == str(final)
    assert saved["run"]["train"]["global_step"] == 1 and saved["eval_config"]["judge"]["n"] == 3
    assert (out / "heldout" / "report.md").exists() and (out / "heldout" / "tpr_tnr.png").exists()
    assert 0.0 <= saved["mean_reward"] <= 1.0 and len(saved["per_record_reward"]) == 5
    ref = score(ScoreConfig(gold=str(out / "heldout" / "held_out.jsonl"),
                            predictions=str(out / "heldout" / "judgments.jsonl"), out=str(tmp_path / "score"),
                            bootstrap=BootstrapSpec(n=100, seed=0), report=False))
    for key in ("rough.tpr", "rough.tnr", "rough.balanced_f1", "meta.tpr", "meta.tnr", "meta.balanced_f1"):
        assert saved[key] == ref[key] == m[key], key
    assert saved["n"] == ref["n"] == 5


def test_llm_meta_reward_for_a_few_grpo_steps(tmp_path, tiny_model, endpoint):
    """Meta-Ver-RL with the LLM meta-verifier on the session vLLM server (grades forced to the B.3 format)."""
    from training.config import GRPORunConfig
    from training.grpo import run
    from verifier.config import compose

    cfg = compose("grpo", GRPORunConfig, ["experiment=smoke", f"output_dir={tmp_path / 'llm'}",
                                          *_tiny(tiny_model), "grpo.max_steps=2", "grpo.save_steps=2",
                                          "reward.meta.kind=llm", "reward.format_gate=false",
                                          "reward.meta.max_tokens=48", "eval.enabled=false", "wandb.enabled=false"])
    cfg.reward.meta.endpoint = dataclasses.replace(endpoint, extra_body={"structured_outputs": {"regex": GRADE_REGEX}})
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
    from training.trainer import last_checkpoint

    assert last_checkpoint(tmp_path) is None
    (tmp_path / "checkpoint-4").mkdir()  # half-written: no trainer_state.json
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text("{}")
    assert last_checkpoint(tmp_path).name == "checkpoint-2"


def test_configs_compose_for_every_experiment_and_model():
    from training.config import GRPORunConfig
    from verifier.config import compose

    ladder = ["base", "rough_rl", "meta_ver_rl", "extra_ann", "pos_aug", "pess_ver", "smoke"]
    cfgs = {e: compose("grpo", GRPORunConfig, [f"experiment={e}"]) for e in ladder}
    assert cfgs["base"].train is False
    assert cfgs["rough_rl"].reward.components == {"rough": 1.0, "meta": 0.0}
    assert cfgs["meta_ver_rl"].reward.components["meta"] == 1.0
    assert cfgs["pess_ver"].eval.judge.n == 8 and cfgs["pess_ver"].eval.judge.policy == "pessimistic"
    assert cfgs["extra_ann"].data.synthetic["valid_fraction"] < cfgs["pos_aug"].data.synthetic["valid_fraction"]
    assert cfgs["smoke"].output_dir == "runs/grpo/smoke"
    import yaml

    for m in ("tiny", "tiny_lora", "qwen3_8b", "qwen3_8b_full", "qwen3_30b_a3b", "qwen3_30b_a3b_full"):
        c = compose("grpo", GRPORunConfig, [f"model={m}", "experiment=meta_ver_rl"])
        # every value of configs/model/<m>.yaml reaches the run config, next to the experiment's own
        want = yaml.safe_load((REPO / "configs" / "model" / f"{m}.yaml").read_text())
        lora = want.pop("lora", {})
        for k, v in want.items():
            assert getattr(c.model, k) == v, (m, k)
        for k, v in lora.items():
            assert getattr(c.model.lora, k) == v, (m, "lora", k)
        assert c.experiment_name == "meta_ver_rl" and c.reward.components == cfgs["meta_ver_rl"].reward.components
        assert c.grpo == cfgs["meta_ver_rl"].grpo and c.data == cfgs["meta_ver_rl"].data
    assert compose("grpo", GRPORunConfig, ["model=qwen3_30b_a3b"]).model.lora.enabled
    assert not compose("grpo", GRPORunConfig, ["model=qwen3_8b_full"]).model.lora.enabled


def test_renamed_eval_keys_keep_working_on_the_command_line(capsys):
    """issue 24: eval.n_passes ... moved into the one judge config (eval.judge) and the one bootstrap config
    (eval.bootstrap); the old command-line keys are read under their new names, each with a note."""
    from training.config import GRPORunConfig
    from verifier.config import compose

    c = compose("grpo", GRPORunConfig, ["experiment=pess_ver", "eval.n_passes=3", "eval.aggregation=k_of_n",
                                        "eval.k=2", "eval.max_new_tokens=12", "eval.temperature=0.5",
                                        "eval.top_p=0.9", "eval.bootstrap_n=7", "eval.seed=5"])
    j = c.eval.judge
    assert (j.n, j.policy, j.k, j.max_tokens, j.temperature, j.top_p, j.run_seed) == (3, "k_of_n", 2, 12, 0.5, 0.9, 5)
    assert (c.eval.bootstrap.n, c.eval.bootstrap.seed) == (7, 5) and j.early_stop is False
    assert "note: eval.n_passes is now eval.judge.n" in capsys.readouterr().err
    # the held-out defaults: one pessimistic pass, every pass run, HELDOUT_MAX_TOKENS (16384), the run's prompt
    from training.config import HELDOUT_MAX_TOKENS

    d = GRPORunConfig().eval
    assert HELDOUT_MAX_TOKENS == 16384
    assert (d.judge.n, d.judge.policy, d.judge.early_stop, d.judge.max_tokens, d.judge.temperature) == (
        1, "pessimistic", False, HELDOUT_MAX_TOKENS, 1.0)
    assert d.judge_config(with_reference=True, template="verify_compact").template == "verify_compact"
    assert compose("grpo", GRPORunConfig, []).eval.judge_config().with_reference is False


def test_renamed_reward_keys_keep_working_on_the_command_line(capsys):
    """issue 24: the reward's meta-verifier keys moved into the one meta-verifier config (reward.meta)."""
    from training.config import GRPORunConfig
    from verifier.config import compose

    c = compose("grpo", GRPORunConfig, ["reward.meta_judge=llm", "reward.endpoint.base_url=http://m:1/v1",
                                        "reward.judge_max_tokens=48", "reward.judge_temperature=0.3",
                                        "reward.judge_sees_reasoning=true", "reward.near=2"])
    m = c.reward.meta
    assert (m.kind, m.endpoint.base_url, m.max_tokens, m.temperature, m.show_reasoning, m.near) == (
        "llm", "http://m:1/v1", 48, 0.3, True, 2)
    assert c.reward.meta_verifier(run_seed=4) == dataclasses.replace(m, run_seed=4)
    assert "note: reward.endpoint.base_url is now reward.meta.endpoint.base_url" in capsys.readouterr().err
    from verifier.config import renamed

    assert renamed(GRPORunConfig, ["reward.endpoint.api_key=sk-CANARY"]) == ["reward.meta.endpoint.api_key=sk-CANARY"]
    assert "sk-CANARY" not in capsys.readouterr().err  # the note names the key's new name, never the key


def _old_key_experiment(tmp_path: Path, body: str = "eval:\n  n_passes: 8\n") -> Path:
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "old_keys.yaml").write_text(f"# @package _global_\nexperiment_name: old_keys\n{body}")
    return tmp_path


@pytest.mark.parametrize("body,message", [
    ("eval:\n  n_passes: 8\n", r"eval\.n_passes is now eval\.judge\.n"),
    ("eval:\n  seed: 3\n", r"eval\.seed is now eval\.judge\.run_seed and eval\.bootstrap\.seed"),
    ("reward:\n  meta_judge: llm\n", r"reward\.meta_judge is now reward\.meta\.kind"),
    ("reward:\n  endpoint:\n    base_url: http://m:1/v1\n", r"reward\.endpoint is now reward\.meta\.endpoint")])
def test_renamed_key_in_a_yaml_file_names_its_new_key(tmp_path, body, message):
    from training.config import GRPORunConfig
    from verifier.config import compose
    from verifier.errors import InputError

    d = _old_key_experiment(tmp_path, body)
    with pytest.raises(InputError, match=message):
        compose("grpo", GRPORunConfig, ["experiment=old_keys", f"hydra.searchpath=[file://{d}]"])


def test_renamed_eval_key_in_a_yaml_file_is_one_error_of_the_command(tmp_path):
    from verifier.errors import EXIT_USER_ERROR

    d = _old_key_experiment(tmp_path)
    env = {k: v for k, v in _env().items() if k != "HYDRA_FULL_ERROR"}
    r = subprocess.run([PY, "training/grpo.py", "--cfg", "job", "experiment=old_keys", f"hydra.searchpath=[file://{d}]"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == EXIT_USER_ERROR, r.stderr[-2000:]
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("training/grpo.py: error: ")]
    assert len(errors) == 1 and "eval.n_passes is now eval.judge.n" in errors[0], r.stderr[-2000:]


@pytest.mark.vllm
def test_lora_grpo_step_in_process(tmp_path, tiny_model):
    """The PEFT LoRA path: one GRPO step, the adapter saved, a merged copy judged by VerifierBench."""
    from training.config import GRPORunConfig
    from training.grpo import run
    from verifier.config import compose

    cfg = compose("grpo", GRPORunConfig, ["experiment=smoke", "model=tiny_lora", f"output_dir={tmp_path / 'lora'}",
                                          *_tiny(tiny_model), "grpo.max_steps=1", "grpo.save_steps=1",
                                          "data.n_eval=4", "wandb.enabled=false"])
    m = run(cfg)
    out = tmp_path / "lora"
    assert (out / "final" / "adapter_config.json").exists()
    assert (out / "final_merged" / "config.json").exists() and not (out / "final_merged" / "adapter_config.json").exists()
    assert m["n"] == 4 and "meta.balanced_f1" in m and m["heldout"]["model"] == str(out / "final_merged")
    # the merged copy is a plain checkpoint of the base architecture (what vLLM loads), no adapter weights
    from safetensors import safe_open

    def keys(d):
        with safe_open(str(d / "model.safetensors"), "pt") as f:
            return set(f.keys())

    assert keys(out / "final_merged") == keys(Path(tiny_model))


@pytest.mark.slow
@pytest.mark.vllm
def test_table3_sweep_and_ablation_report(tmp_path, tiny_model):
    """`python training/grpo.py -m experiment=...` over the whole ladder, then `python -m eval.report`."""
    ladder = "base,rough_rl,meta_ver_rl,extra_ann,pos_aug,pess_ver"
    root = tmp_path / "sweep"
    cmd = [PY, "training/grpo.py", "-m", f"experiment={ladder}", f"output_dir={root}/${{experiment_name}}",
           *_tiny(tiny_model), "grpo.max_steps=1", "grpo.per_device_train_batch_size=4", "grpo.num_generations=4",
           "grpo.max_completion_length=8", "grpo.save_steps=1", "data.n_train=8", "data.n_eval=6",
           "eval.judge.max_tokens=8", "eval.bootstrap.n=50", "wandb.enabled=false", f"hydra.sweep.dir={tmp_path}/mr"]
    p = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    names = ladder.split(",")
    for n in names:
        m = json.loads((root / n / "metrics.json").read_text())
        assert m["run"]["experiment"] == n and "meta.balanced_f1" in m
        assert ("train" in m["run"]) == (n not in ("base", "pess_ver"))
    pess = json.loads((root / "pess_ver" / "metrics.json").read_text())
    assert pess["eval_config"]["judge"]["n"] == 8  # pess_ver: the pos_aug weights, judged 8 times, not trained
    assert pess["heldout"]["model"] == str(root / "pos_aug" / "final") and not (root / "pess_ver" / "final").exists()
    rep = subprocess.run([PY, "-m", "eval.report", f"runs=[{root}]", f"out={tmp_path / 'report'}", "base=base"],
                         cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stdout[-3000:] + rep.stderr[-3000:]
    md = (tmp_path / "report" / "ablation.md").read_text()
    for n in names:
        assert n in md


@pytest.mark.slow
@pytest.mark.vllm
def test_submitit_local_launcher_runs_a_job(tmp_path, tiny_model):
    """The submitit launcher config (configs/hydra/launcher/slurm*.yaml) on local processes: one eval-only job."""
    out = tmp_path / "base"
    cmd = [PY, "training/grpo.py", "-m", "hydra/launcher=slurm_local", "experiment=base", f"output_dir={out}",
           *_tiny(tiny_model), "data.n_eval=4", "eval.judge.max_tokens=8", "eval.bootstrap.n=20",
           "wandb.enabled=false", f"hydra.sweep.dir={tmp_path / 'mr'}"]
    p = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert json.loads((out / "metrics.json").read_text())["run"]["experiment"] == "base"
    logs = list((tmp_path / "mr" / ".submitit").glob("*/*_log.out"))
    assert logs  # ran as a submitit job, which started the run through accelerate with the profile's file
    job_log = logs[0].read_text()
    assert re.search(r"submitit job: \S*accelerate launch --config_file \S*launch/accelerate/cpu\.yaml ", job_log), job_log
    assert "training/grpo.py experiment=base" in job_log


def test_processbench_loader_splits_by_problem_with_the_split_module(shared_data):
    # issue 14, item 2: the GRPO loader's held-out slice is data_pipeline.splits.split_by_problem's,
    # so no gsm8k problem (375 problems, 400 proofs) is on both sides.
    from verifier.formats import load_processbench
    from data_pipeline.splits import split_by_problem
    from training.config import DataConfig
    from training.data import load_trajectories_for

    train, held = load_trajectories_for(DataConfig(source="processbench", n_train=300, n_eval=94, seed=3))
    assert not {t.problem for t in train} & {t.problem for t in held}
    assert len(train) == 300 and abs(len(held) - 94) <= 2
    ref = split_by_problem(load_processbench(shared_data / "processbench" / "gsm8k.json"), held_out_size=94, seed=3)
    assert [t.id for t in held] == [t.id for t in ref.held_out]
    assert {t.id for t in train} <= {t.id for t in ref.train}


class _ScriptedJudge:
    """Stands in for a meta-verifier whose 4th call of the step fails after retries (grade None).

    The grades of the other three are fixed (1, 0.5, 0), so the group has a spread that a
    failed call counted as 0 would shift; a real judge cannot be made to fail on one chosen call.
    """

    def __init__(self, near: int = 1):
        from verifier.records import MetaGrade, MetaVerification, ParseStatus

        ok = [MetaVerification(ParseStatus.OK, g) for g in
              (MetaGrade.EXACT_MATCH, MetaGrade.BASIC_MATCH, MetaGrade.WRONG_POLARITY)]
        self.script = ok + [MetaVerification(ParseStatus.REQUEST_FAILED, detail="HTTP 503 after retries")]

    async def agrade_batch(self, pairs):
        return [self.script[i % 4] for i in range(len(pairs))]


def test_failed_judge_call_is_neutral_in_the_grpo_advantage(tmp_path, tiny_model, monkeypatch):
    """Issue 14.3: one failed meta-verifier call in a group of 4 (meta_ver_rl: rough weight 0, meta 1)
    gets advantage 0 and is left out of the group baseline, through TRL's real GRPOTrainer step."""
    import numpy as np
    import pandas as pd

    from training.config import GRPORunConfig
    from training.grpo import run
    from verifier import meta_verifier
    from verifier.config import compose

    monkeypatch.setattr(meta_verifier, "RuleMetaVerifier", _ScriptedJudge)  # make_meta_verifier builds the reward's
    out = tmp_path / "neutral"
    cfg = compose("grpo", GRPORunConfig, ["experiment=meta_ver_rl", f"output_dir={out}", *_tiny(tiny_model),
                                          "grpo.max_steps=1", "grpo.save_steps=1", "grpo.per_device_train_batch_size=4",
                                          "grpo.num_generations=4", "grpo.max_completion_length=8",
                                          "data.n_train=4", "reward.format_gate=false", "eval.enabled=false",
                                          "wandb.enabled=false"])
    assert cfg.reward.components == {"rough": 0.0, "meta": 1.0}
    run(cfg)
    table = pd.read_parquet(sorted((out / "completions").glob("*.parquet"))[-1])
    assert len(table) == 4 and list(table["meta_grade"]).count("JUDGE_FAILED") == 1
    meta, adv = table["meta"].to_numpy(float), table["advantage"].to_numpy(float)
    failed = np.isnan(meta)
    assert failed.sum() == 1  # logged as missing, not as 0
    assert adv[failed][0] == pytest.approx(0.0, abs=1e-6)  # no push either way
    graded = meta[~failed]
    centred = graded - graded.mean()  # baseline over the three graded completions only
    assert np.sign(adv[~failed]).tolist() == np.sign(np.round(centred, 6)).tolist()
    assert adv[~failed].sum() == pytest.approx(0.0, abs=1e-5)
    hist = json.loads((out / "train_log.json").read_text())
    step = next(h for h in hist if "rewards/meta/mean" in h)
    assert step["rewards/meta/mean"] == pytest.approx(0.5) and step["meta/judge_failures"] == 1
