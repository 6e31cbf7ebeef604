"""Stage wiring of `make demo` (launch/demo.py) without running it.

The stages are recorded instead of executed (no servers), then every recorded command's Hydra
overrides are composed against the real config and schema of its app: a renamed field, a missing
`+` for a key that the YAML does not list, or a structured-output regex mangled by Hydra's quoting
fails here, in seconds, instead of ten minutes into the demo.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

APPS = {  # command -> (config name, schema "module:Class")
    "data_pipeline.synthetic": ("synthetic", "data_pipeline.synthetic:SyntheticConfig"),
    "data_pipeline.ingest": ("ingest", "data_pipeline.ingest:IngestConfig"),
    "data_pipeline.splits": ("split", "data_pipeline.splits:SplitConfig"),
    "data_pipeline.selection": ("select", "data_pipeline.selection:SelectConfig"),
    "data_pipeline.augment": ("augment", "data_pipeline.augment:AugmentConfig"),
    "data_pipeline.grpo_dataset": ("grpo_data", "data_pipeline.grpo_dataset:GrpoDataConfig"),
    "training/sft.py": ("sft", "training.sft:SFTRunConfig"),
    "training/grpo.py": ("grpo", "training.grpo:GRPORunConfig"),
    "eval.verifierbench": ("verifierbench", "eval.verifierbench:VerifierBenchConfig"),
}


def _demo_module():
    spec = importlib.util.spec_from_file_location("launch_demo", REPO / "launch" / "demo.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["launch_demo"] = mod
    spec.loader.exec_module(mod)
    return mod


class FakeServer:
    def __init__(self, name: str, served: str):
        self.base_url = f"http://127.0.0.1:{9000 + len(name)}/v1"
        self.model_name = served
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    demo = _demo_module()
    out = tmp_path_factory.mktemp("demo")
    # an evaluation result as eval.verifierbench writes it (flat metric keys): the summary must pick it up
    (out / "eval_heldout").mkdir()
    (out / "eval_heldout" / "metrics.json").write_text(
        '{"rough.tpr": {"value": 0.25, "counts": {}, "ci": [0, 1]}, "meta.balanced_f1": {"value": 0.125}, "n": 94}')
    calls, servers = [], []

    def fake_run(self, name, args, outputs):
        calls.append((name, list(args), dict(outputs)))
        self.stages.append(demo.Stage(name, ["python", *args], outputs, 0.0, ""))

    def fake_start(d, name, model, served, log, wait):
        s = FakeServer(name, served)
        s.model = model
        servers.append(s)
        return s

    mp = pytest.MonkeyPatch()
    mp.setattr(demo.Demo, "run", fake_run)
    mp.setattr(demo, "start_server", fake_start)
    mp.setattr(demo, "wait_server", lambda *a, **k: None)
    try:
        report = demo.pipeline(demo.DemoConfig(out=str(out)))
    finally:
        mp.undo()
    return demo, out, calls, servers, report


def _app(args):
    return args[1] if args[0] == "-m" else args[0]


def test_stage_order_and_servers(recorded):
    _, out, calls, servers, report = recorded
    apps = [_app(a) for _, a, _ in calls]
    assert apps == ["verifier.tiny_model", "data_pipeline.synthetic", "data_pipeline.synthetic",
                    "data_pipeline.ingest", "data_pipeline.splits", "data_pipeline.selection",
                    "data_pipeline.ingest", "data_pipeline.augment", "data_pipeline.grpo_dataset",
                    "training/sft.py", "training/grpo.py", "eval.verifierbench", "eval.verifierbench"]
    # two servers: A on the base tiny model, B on the GRPO output; both stopped
    assert [s.model_name for s in servers] == ["tiny-base", "verifier"]
    assert servers[1].model == str(out / "grpo" / "final") and all(s.stopped for s in servers)
    grpo = dict(a.split("=", 1) for a in calls[10][1][1:] if "=" in a)
    assert grpo["reward.meta_judge"] == "llm" and grpo["reward.endpoint.base_url"] == servers[0].base_url
    assert grpo["init_from"] == str(out / "sft" / "final")
    for _, args, _ in calls[-2:]:
        kv = dict(a.split("=", 1) for a in args[2:])
        assert kv["verifier.base_url"] == servers[1].base_url
        assert kv["judge.n"] == "8" and kv["judge.policy"] == "pessimistic"
    # ProcessBench gsm8k: a balanced subset of 40 (20 erroneous, 20 correct) from ../shared/data
    subset = out / "processbench_gsm8k_subset.jsonl"
    assert calls[-1][1][2] == f"data={subset}"
    from verifier.io import load_trajectories

    recs = load_trajectories(subset).records
    assert len(recs) == 40 and sum(r.annotation.is_valid for r in recs) == 20
    assert all(r.source.startswith("processbench") for r in recs), {r.source for r in recs}
    # the summary is written even with no evaluation output; the report is the returned path
    assert report == out / "report.md" and report.exists() and (out / "metrics.json").exists()
    text = report.read_text()
    assert "a SUBSET is judged" in text and "40 records" in text
    assert "| held_out | 94 | 0.250 | — | — | — | — | 0.125 | — |" in text
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["evaluations"]["held_out"]["rough.tpr"] == 0.25
    assert summary["stages"][0]["name"] == "tiny model" and len(summary["stages"]) == 14


@pytest.mark.parametrize("index", range(1, 13))
def test_every_command_composes(recorded, index):
    from verifier.config import compose

    demo, _, calls, _, _ = recorded
    _, args, _ = calls[index]
    app = _app(args)
    config, schema = APPS[app]
    mod, cls = schema.split(":")
    overrides = args[2:] if args[0] == "-m" else args[1:]
    cfg = compose(config, getattr(__import__(mod, fromlist=[cls]), cls), overrides)
    if app == "data_pipeline.selection":
        rx = cfg.endpoint.extra_body["structured_outputs"]["regex"]
        assert rx == demo.VERDICT_REGEX
        assert re.fullmatch(rx, "<final_answer>\nverdict: invalid\nfirst_error_step: 2\n</final_answer>")
    if app == "data_pipeline.augment":
        from verifier.judging import synthetic_verdict_regex

        assert cfg.verifiers[0].extra_body["structured_outputs"]["regex"] == synthetic_verdict_regex(95, 3)
    if app == "training/grpo.py":
        assert cfg.experiment_name == "meta_ver_rl" and cfg.reward.components.get("meta") == 1.0
        rx = cfg.reward.endpoint.extra_body["structured_outputs"]["regex"]
        assert re.fullmatch(rx, "<final_answer>\ngrade: POOR_MATCH\n</final_answer>")
        assert cfg.data.source == "jsonl" and cfg.eval.enabled is False


def test_demo_config_mirrors_yaml():
    from verifier.config import compose

    demo = _demo_module()
    assert compose("demo", demo.DemoConfig) == demo.DemoConfig()


def test_missing_shared_data_fails_before_any_stage(tmp_path, monkeypatch):
    from data_pipeline import importers

    demo = _demo_module()
    ran = []
    monkeypatch.setattr(importers, "SHARED_DATA", tmp_path / "nowhere")
    monkeypatch.setattr(demo.Demo, "run", lambda self, *a, **k: ran.append(a))
    monkeypatch.setattr(demo, "start_server", lambda *a, **k: ran.append(a))
    with pytest.raises(SystemExit, match="VERIFIER_SHARED_DATA"):
        demo.pipeline(demo.DemoConfig(out=str(tmp_path / "demo")))
    assert ran == []
