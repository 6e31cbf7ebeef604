"""One set of W&B defaults for the Table 3 ladder (issue 42 item 5): SFT (``training/sft.py``), GRPO training
(``training/grpo.py``) and ``python -m eval.report`` log to one project, one group per ladder (the folder that
holds the ladder's runs, e.g. ``sweep.sh``'s SWEEP_DIR), on by default (offline without WANDB_API_KEY), with
one config class (``verifier.results.WandbConfig``) and no secret in what reaches W&B."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from verifier.config import compose
from verifier.results import write_metrics

SECRET = "sk-canary-0123456789abcdef"


def _configs(tmp_path, *extra):
    from eval.report import ReportConfig
    from training.config import GRPORunConfig
    from training.sft import SFTRunConfig

    sweep = tmp_path / "sweep"
    for row in ("base", "rough_rl"):
        write_metrics(sweep / row, {"rough.tpr": {"value": 0.5, "ci": None}, "n": 2})
    sft = compose("sft", SFTRunConfig, [f"output_dir={sweep / 'sft'}", *extra])
    grpo = compose("grpo", GRPORunConfig, ["experiment=rough_rl", f"output_dir={sweep / 'rough_rl'}",
                                           f"reward.meta.endpoint.api_key={SECRET}", *extra])
    report = compose("report", ReportConfig, [f"runs=[{sweep}]", f"out={sweep / 'report'}", *extra])
    return sft, grpo, report


@pytest.fixture
def captured(monkeypatch):
    """wandb.init replaced by a recorder (no W&B run is started); the environment without key, mode or group."""
    import wandb

    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_RUN_GROUP"):
        monkeypatch.delenv(var, raising=False)
    calls = []

    def init(**kw):
        calls.append(kw)
        return types.SimpleNamespace(log=lambda *a, **k: None, finish=lambda: None, summary={})

    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.setattr("eval.report.log_table", lambda *a, **k: 0)
    monkeypatch.setattr("eval.report.log_images", lambda *a, **k: [])
    return calls


def _start_all(sft, grpo, report, calls):
    from eval.report import run as report_run
    from training import sft as sft_mod
    from training.tracking import init_wandb, run_name

    for cfg in (sft, grpo):
        Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
    sft_mod.init_wandb(sft, Path(sft.output_dir))
    init_wandb(grpo, Path(grpo.output_dir), is_main=True, name=run_name(grpo))
    report_run(report)
    assert [c["job_type"] for c in calls] == ["sft", "grpo", "report"]
    return calls


def test_the_ladder_commands_share_one_wandb_project_and_group(tmp_path, captured):
    sft, grpo, report = _configs(tmp_path)
    # the composed entry configs (configs/{sft,grpo,report}.yaml): one class, one project, all on, same mode
    ws = [sft.wandb, grpo.wandb, report.wandb]
    assert [c.project for c in ws] == ["proofverifier-grpo"] * 3
    assert [c.enabled for c in ws] == [True] * 3

    from training.tracking import wandb_mode
    from verifier.results import LADDER_WANDB_PROJECT, WandbConfig

    assert LADDER_WANDB_PROJECT == "proofverifier-grpo"
    assert all(isinstance(c, WandbConfig) for c in ws)
    assert all(c.enabled for c in ws) and {c.mode for c in ws} == {"auto"} and {c.group for c in ws} == {None}
    assert {wandb_mode(c) for c in ws} == {"offline"}  # no key: offline
    # and their dataclass defaults, built in Python without Hydra
    from eval.report import ReportConfig
    from training.config import GRPORunConfig
    from training.sft import SFTRunConfig

    assert SFTRunConfig().wandb == GRPORunConfig().wandb == ReportConfig().wandb == grpo.wandb
    # what reaches wandb.init: one project, one group (the ladder's folder), offline; no secret
    calls = _start_all(sft, grpo, report, captured)
    assert {c["project"] for c in calls} == {LADDER_WANDB_PROJECT}
    assert {c["group"] for c in calls} == {"sweep"}
    assert {c["mode"] for c in calls} == {"offline"}
    assert all(SECRET not in repr(c) for c in calls)
    assert calls[1]["name"].startswith("rough_rl") and "rough_rl" in calls[1]["tags"]


def test_an_explicit_group_or_wandb_run_group_groups_all_three(tmp_path, captured, monkeypatch):
    calls = _start_all(*_configs(tmp_path, "wandb.group=ladder-7"), captured)
    assert {c["group"] for c in calls} == {"ladder-7"}
    captured.clear()
    monkeypatch.setenv("WANDB_RUN_GROUP", "from-env")
    calls = _start_all(*_configs(tmp_path / "again"), captured)
    assert {c["group"] for c in calls} == {"from-env"}


def test_wandb_off_starts_nothing(tmp_path, captured):
    from eval.report import run as report_run
    from training import sft as sft_mod
    from training.tracking import init_wandb

    sft, grpo, report = _configs(tmp_path, "wandb.enabled=false")
    assert sft_mod.init_wandb(sft, Path(tmp_path)) is None and init_wandb(grpo, Path(tmp_path), True, "g") is None
    report_run(report)
    assert captured == []
