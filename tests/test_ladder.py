"""Issue 27: the Table 3 ladder's per-row rules and the start-up checks (training/ladder.py, training/preflight.py).

Per-variant data, pess_ver as evaluation only, held-out data required, every vLLM config of every
profile x experiment x model validated with vLLM's own config classes, served endpoints asked for
their models, thinking budgets, LoRA's own learning rate. All before any weights load.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training import ladder, preflight
from training.config import GRPORunConfig
from training.grpo import check_scale
from verifier.config import compose
from verifier.engine import served_models

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = ["base", "rough_rl", "meta_ver_rl", "extra_ann", "pos_aug", "pess_ver", "smoke"]
REAL_MODELS = ["qwen3_8b", "qwen3_8b_full", "qwen3_30b_a3b", "qwen3_30b_a3b_full"]
TINY_MODELS = ["tiny", "tiny_lora"]


@pytest.fixture()
def layout(tmp_path):
    """The folder layout data_pipeline.grpo_dataset + splits write: ROOT/<variant>/{trajectories,summary} + held_out."""
    from data_pipeline.synthetic import generate_synthetic
    from verifier.io import write_jsonl

    root = tmp_path / "grpo"
    for i, v in enumerate(("base", "extra_ann", "pos_aug")):
        (root / v).mkdir(parents=True)
        write_jsonl(root / v / "trajectories.jsonl", generate_synthetic(4 + 2 * i, seed=i))
        (root / v / "summary.json").write_text(json.dumps({"variant": v, "rows": 4 + 2 * i}))
    write_jsonl(root / "held_out.jsonl", generate_synthetic(4, seed=99))
    return root


def _cluster(model: str, experiment: str, *extra: str) -> GRPORunConfig:
    return compose("grpo", GRPORunConfig, ["profile=cluster", f"model={model}", f"experiment={experiment}", *extra])


def test_each_row_reads_its_own_variant(layout):
    paths = {}
    for e in ("base", "rough_rl", "meta_ver_rl", "extra_ann", "pos_aug", "pess_ver"):
        c = _cluster("qwen3_8b", e, f"data.root={layout}", "init_from=/scratch/runs/sft/final")
        ladder.prepare(c)
        check_scale(c)
        paths[e] = c.data.train_path
        assert c.data.eval_path == str(layout / "held_out.jsonl")
    assert paths["extra_ann"] == str(layout / "extra_ann" / "trajectories.jsonl")
    assert paths["pos_aug"] == str(layout / "pos_aug" / "trajectories.jsonl")
    assert paths["meta_ver_rl"] == paths["rough_rl"] == str(layout / "base" / "trajectories.jsonl")
    # the trained data-ablation rows read three different files
    assert len({paths["meta_ver_rl"], paths["extra_ann"], paths["pos_aug"]}) == 3


def test_base_row_without_init_from_is_an_error_naming_init_from(layout, tiny_model):
    """Issue 42 item 2: Table 3's base is the SFT warm start evaluated untrained (init_from); a real-model base row
    without init_from would silently evaluate the hub model instead, so it stops, naming init_from and both models."""
    with pytest.raises(ladder.LadderConfigError) as e:
        ladder.prepare(_cluster("qwen3_8b", "base", f"data.root={layout}"))
    msg = str(e.value)
    assert "init_from" in msg and "model.name_or_path=Qwen/Qwen3-8B" in msg and "init_from=Qwen/Qwen3-8B" in msg
    assert "SFT" in msg
    ladder.prepare(_cluster("qwen3_8b", "base", f"data.root={layout}", "init_from=/scratch/runs/sft/final"))
    ladder.prepare(_cluster("qwen3_8b", "base", f"data.root={layout}", "init_from=Qwen/Qwen3-8B"))  # said explicitly
    for e in ("rough_rl", "pess_ver"):  # the check is the base row's (pess_ver evaluates pos_aug's weights)
        ladder.prepare(_cluster("qwen3_8b", e, f"data.root={layout}"))
    # the tiny model (tests, demos) is exempt
    ladder.prepare(compose("grpo", GRPORunConfig, ["experiment=base", f"model.name_or_path={tiny_model}"]))


def test_variant_row_given_the_base_rows_data_is_an_error(layout):
    c = _cluster("qwen3_8b", "extra_ann", f"data.train_path={layout / 'base' / 'trajectories.jsonl'}",
                 f"data.eval_path={layout / 'held_out.jsonl'}")
    with pytest.raises(ladder.LadderConfigError) as e:
        ladder.prepare(c)
    assert "data.variant=extra_ann" in str(e.value) and "data.train_path=" in str(e.value)


def test_pess_ver_evaluates_the_pos_aug_run_and_does_not_train(tmp_path):
    c = compose("grpo", GRPORunConfig, ["experiment=pess_ver", f"output_dir={tmp_path}/sweep/pess_ver"])
    ladder.prepare(c)
    assert c.train is False and c.eval.judge.n == 8 and c.eval.judge.policy == "pessimistic"
    assert c.evaluate_run == str(tmp_path / "sweep" / "pos_aug")
    with pytest.raises(ladder.LadderConfigError, match="evaluate_run=.*no finished run"):
        ladder.wait_for_run(c.evaluate_run, 0)
    final = tmp_path / "sweep" / "pos_aug" / "final"
    final.mkdir(parents=True)
    (final / "config.json").write_text("{}")
    (tmp_path / "sweep" / "pos_aug" / "train_summary.json").write_text("{}")
    assert ladder.wait_for_run(c.evaluate_run, 0) == final
    with pytest.raises(ladder.LadderConfigError, match="train=false"):
        ladder.prepare(compose("grpo", GRPORunConfig, ["experiment=pess_ver", "train=true"]))


def test_no_held_out_data_stops_before_loading(layout, tiny_model, tmp_path, monkeypatch):
    import training.grpo as grpo
    from training import trainer

    def boom(*a, **k):
        raise AssertionError("loaded data or a model")

    monkeypatch.setattr(grpo, "load_trajectories_for", boom)
    monkeypatch.setattr(trainer, "load_model", boom)
    args = ["experiment=meta_ver_rl", f"model.name_or_path={tiny_model}", "data.source=jsonl",
            f"data.train_path={layout / 'base' / 'trajectories.jsonl'}", f"output_dir={tmp_path / 'run'}",
            "wandb.enabled=false"]
    with pytest.raises(ladder.LadderConfigError, match="eval.enabled=true but data.eval_path=null"):
        grpo.run(compose("grpo", GRPORunConfig, args))
    c = compose("grpo", GRPORunConfig, [*args, "eval.enabled=false"])
    ladder.prepare(c)  # explicit: trains without a held-out evaluation


@pytest.mark.parametrize("profile,models", [("cpu_tiny", TINY_MODELS), ("cluster", REAL_MODELS)])
def test_every_profile_experiment_model_config_is_one_vllm_accepts(profile, models, tiny_model, layout):
    """Item 3: every vLLM engine a run builds, validated with vLLM's own config classes (no weights load)."""
    checked = []
    for m in models:
        for e in EXPERIMENTS:
            extra = [f"data.root={layout}"] if profile == "cluster" else ["data.n_eval=4"]
            if m.startswith("tiny"):
                extra.append(f"model.name_or_path={tiny_model}")
            for gen in ([], ["grpo.use_vllm=true", "grpo.vllm_mode=colocate"]):
                c = compose("grpo", GRPORunConfig, [f"profile={profile}", f"model={m}", f"experiment={e}", *extra, *gen])
                check_scale(c)
                c.init_from = c.init_from or c.model.name_or_path  # base: which model it evaluates, said explicitly
                ladder.prepare(c)
                r = preflight.check(c, endpoints_too=False)
                assert "eval.offline" in r["vllm"]
                assert ("grpo.vllm_*" in r["vllm"]) == (bool(gen) and c.train)
                checked.append((m, e, tuple(r["vllm"].values())))
    # the tiny model's config is local: the whole VllmConfig is built (EngineArgs.create_engine_config)
    assert all(set(how) == {"engine_config"} for m, _, how in checked if m.startswith("tiny"))
    assert len(checked) == len(models) * len(EXPERIMENTS) * 2


def test_cpu_workaround_on_the_cluster_profile_is_rejected_naming_the_key(layout):
    c = _cluster("qwen3_8b_full", "meta_ver_rl", f"data.root={layout}", "eval.offline.enable_chunked_prefill=false",
                 "eval.offline.max_num_batched_tokens=8192")
    with pytest.raises(preflight.PreflightError, match=r"(?s)eval.offline: .*max_num_batched_tokens \(8192\) is smaller "
                                                       r"than max_model_len"):
        preflight.check(c, endpoints_too=False)


def test_tiny_engine_config_rejected_by_create_engine_config(tiny_model):
    c = compose("grpo", GRPORunConfig, ["experiment=smoke", f"model.name_or_path={tiny_model}",
                                        "eval.offline.max_num_batched_tokens=1024"])
    with pytest.raises(preflight.PreflightError, match="eval.offline: vLLM rejects"):
        preflight.check(c, endpoints_too=False)


def test_thinking_policy_needs_thinking_budgets(layout):
    ok = _cluster("qwen3_8b", "meta_ver_rl", f"data.root={layout}")
    ladder.prepare(ok)
    assert ok.grpo.mask_truncated_completions and ok.grpo.max_completion_length >= 8192
    assert ok.eval.judge.max_tokens >= ok.grpo.max_completion_length
    assert ok.reward.meta.endpoint.timeout_s >= 600 and ok.reward.meta.endpoint.max_tokens >= 8192
    bad = _cluster("qwen3_8b", "meta_ver_rl", f"data.root={layout}", "grpo.max_completion_length=4096",
                   "grpo.mask_truncated_completions=false")
    with pytest.raises(ladder.LadderConfigError) as e:
        ladder.prepare(bad)
    assert "grpo.max_completion_length=4096" in str(e.value) and "grpo.mask_truncated_completions=false" in str(e.value)
    off = _cluster("qwen3_8b", "meta_ver_rl", f"data.root={layout}", "grpo.max_completion_length=4096",
                   "grpo.mask_truncated_completions=false", "grpo.chat_template_kwargs={enable_thinking: false}")
    ladder.prepare(off)  # a non-thinking policy keeps shorter budgets


def test_lora_and_full_fine_tuning_get_their_own_learning_rates(layout):
    from training.trainer import grpo_config

    cpu = "grpo.bf16=false"  # GRPOConfig refuses bf16 on a CPU machine
    lora = _cluster("qwen3_8b", "meta_ver_rl", f"data.root={layout}", cpu)
    full = _cluster("qwen3_8b_full", "meta_ver_rl", f"data.root={layout}", cpu)
    a = grpo_config(lora, Path("/tmp/x"), [1.0], report_wandb=False).learning_rate
    b = grpo_config(full, Path("/tmp/x"), [1.0], report_wandb=False).learning_rate
    assert a == 1e-5 and b == 1e-6


@pytest.mark.vllm
def test_endpoints_are_asked_for_their_models(endpoint):
    from verifier.config import EndpointConfig

    assert endpoint.model in preflight.check_endpoint("reward.meta.endpoint", endpoint)
    wrong = EndpointConfig(base_url=endpoint.base_url, api_key=endpoint.api_key, model="meta-verifier")
    with pytest.raises(preflight.PreflightError) as e:
        preflight.check_endpoint("reward.meta.endpoint", wrong)
    assert "reward.meta.endpoint.model='meta-verifier' is not served" in str(e.value) and endpoint.model in str(e.value)
    from tests.conftest import free_port

    dead = EndpointConfig(base_url=f"http://127.0.0.1:{free_port()}/v1", api_key="k", model="m")
    with pytest.raises(preflight.PreflightError, match=r"reward.meta.endpoint.base_url=.*does not answer"):
        preflight.check_endpoint("reward.meta.endpoint", dead)


@pytest.mark.vllm
def test_eval_judge_says_when_all_passes_gave_no_verdict_and_lists_served_models(endpoint, tmp_path, capsys):
    """Item 6: the tiny random model never writes the verdict block: every pass of every proof fails to parse,
    and eval.judge says so; a wrong endpoint.model is an error listing what the server serves."""
    import dataclasses

    from data_pipeline.synthetic import generate_synthetic
    from eval.judge import JudgeAppConfig, run
    from verifier.io import write_jsonl
    from verifier.judging import JudgeConfig

    write_jsonl(tmp_path / "in.jsonl", generate_synthetic(2, seed=0))
    cfg = JudgeAppConfig(input=str(tmp_path / "in.jsonl"), output=str(tmp_path / "out.jsonl"), endpoint=endpoint,
                         judge=JudgeConfig(n=2, max_tokens=8, early_stop=False), cache="none", progress=False)
    s = run(cfg)
    assert s["no_verdict"] == 2
    assert "2 proofs got no verdict from any of their 2 passes" in capsys.readouterr().err
    wrong = dataclasses.replace(cfg, endpoint=dataclasses.replace(endpoint, model="verifier"),
                                output=str(tmp_path / "out2.jsonl"))
    with pytest.raises(ValueError, match=rf"endpoint.model='verifier' is not served at .*it serves: .*{endpoint.model}"):
        run(wrong)
    assert not (tmp_path / "out2.jsonl").exists()


def test_serve_a_run_dir_merged_or_base_plus_adapter(tmp_path):
    """Item 6: `python -m verifier.serve run_dir=DIR` serves what training wrote, under the name `verifier`."""
    from verifier.serve import RUN_SERVED_NAME, ServeConfig, resolve_run_dir, server_args

    full, lora = tmp_path / "full", tmp_path / "lora"
    (full / "final").mkdir(parents=True)
    (full / "final" / "config.json").write_text("{}")
    (lora / "final").mkdir(parents=True)
    (lora / "final" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/m/sft", "r": 64}))
    (lora / "final_merged").mkdir()
    (lora / "final_merged" / "config.json").write_text("{}")
    c = resolve_run_dir(ServeConfig(run_dir=str(full), host="0.0.0.0"))
    assert c.model == str(full / "final") and c.served_model_name == RUN_SERVED_NAME == "verifier"
    assert server_args(c)[server_args(c).index("--host") + 1] == "0.0.0.0"
    assert resolve_run_dir(ServeConfig(run_dir=str(lora))).model == str(lora / "final_merged")
    a = resolve_run_dir(ServeConfig(run_dir=str(lora), lora=True))
    assert a.model == "/m/sft" and a.lora_modules == {"verifier": str(lora / "final")} and a.max_lora_rank == 64
    args = server_args(a)
    assert "--enable-lora" in args and json.loads(args[-1]) == {"name": "verifier", "path": str(lora / "final")}
    with pytest.raises(ValueError, match="no final weights"):
        resolve_run_dir(ServeConfig(run_dir=str(tmp_path / "unfinished")))


def test_dead_meta_verifier_stops_the_run_before_loading(tiny_model, tmp_path, monkeypatch):
    """Item 3: the meta-verifier URL is asked for its models at start-up, not after the first generated batch."""
    import training.grpo as grpo
    from tests.conftest import free_port
    from training import trainer

    def boom(*a, **k):
        raise AssertionError("loaded data or a model")

    monkeypatch.setattr(grpo, "load_trajectories_for", boom)
    monkeypatch.setattr(trainer, "load_model", boom)
    cfg = compose("grpo", GRPORunConfig, ["experiment=meta_ver_rl", f"model.name_or_path={tiny_model}",
                                          "reward.meta.kind=llm", "eval.enabled=false", "wandb.enabled=false",
                                          f"reward.meta.endpoint.base_url=http://127.0.0.1:{free_port()}/v1",
                                          f"output_dir={tmp_path / 'run'}"])
    with pytest.raises(preflight.PreflightError, match=r"reward.meta.endpoint.base_url=http://127.0.0.1:\d+/v1: the server "
                                                       r"does not answer"):
        grpo.run(cfg)


@pytest.mark.slow
@pytest.mark.vllm
def test_serving_a_lora_run_dir_as_base_plus_adapter(tiny_model, tiny_lora, tmp_path):
    """Item 6 on a real vLLM server: a LoRA run's `final/` (adapter only) served as base + adapter named `verifier`."""
    import shutil

    from tests.conftest import free_port
    from verifier.serve import ServeConfig, VLLMServer, resolve_run_dir

    run = tmp_path / "run"
    shutil.copytree(tiny_lora, run / "final")  # what save_final writes for LoRA: the adapter only
    cfg = json.loads((run / "final" / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = str(tiny_model)
    (run / "final" / "adapter_config.json").write_text(json.dumps(cfg))
    c = resolve_run_dir(ServeConfig(run_dir=str(run), lora=True, port=free_port(), api_key="k", omp_num_threads=1,
                                    log_file=str(tmp_path / "serve.log")))
    server = VLLMServer(c).start()
    try:
        assert "verifier" in served_models(server.base_url, "k")
    finally:
        server.stop()
