"""Every cluster command written down composes to the run it claims (docs/cluster.md, launch/slurm/).

Commands are read from the files, so the test breaks when the docs drift: the ``bash`` blocks of
docs/cluster.md and of docs/prover.md's "Cluster scale" section, the usage lines in the headers of launch/slurm/*.sbatch and sweep.sh, and the steps those
scripts start (``DRY_RUN=1`` prints them; sweep.sh runs with a ``PYTHON`` that prints its arguments).
Each command is composed with the Hydra config and schema of its app and checked for the values that
matter on GPUs: data source, lengths, steps, bf16, the accelerate/DeepSpeed file, the vLLM mode, and the
scale check (``training.grpo.check_scale``, ``training.scale``) that stops real models with tiny values.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "cluster.md"
PROVER_DOCS = REPO / "docs" / "prover.md"
SLURM = REPO / "launch" / "slurm"


# ---------------------------------------------------------------------------------------------- extraction


def _join(lines: list[str]) -> list[str]:
    """Shell lines with backslash continuations joined; comments and blank lines dropped."""
    out, cur = [], ""
    for raw in lines:
        line = raw.rstrip()
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append((cur + line).strip())
        cur = ""
    return out


def doc_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", DOCS.read_text(), re.S)
    assert blocks, "no bash blocks in docs/cluster.md"
    return [c for b in blocks for c in _join(b.splitlines())]


def prover_doc_commands() -> list[str]:
    """The ``bash`` blocks of docs/prover.md's "Cluster scale" section (issue 42 item 4)."""
    section = re.search(r"^### Cluster scale\n(.*?)^##? ", PROVER_DOCS.read_text(), re.S | re.M)
    assert section, "no Cluster scale section in docs/prover.md"
    blocks = re.findall(r"```bash\n(.*?)```", section.group(1), re.S)
    assert blocks, "no bash blocks in docs/prover.md's Cluster scale section"
    return [c for b in blocks for c in _join(b.splitlines())]


def header_commands(path: Path) -> list[str]:
    """Usage commands in a script's header comments (``#   sbatch ...``, ``#   launch/slurm/sweep.sh ...``)."""
    lines, grab = [], False
    for raw in path.read_text().splitlines():
        if not raw.startswith("#") or raw.startswith("#!") or raw.startswith("#SBATCH"):
            grab = False
            continue
        body = raw[1:].strip()
        if re.match(r"(sbatch|launch/slurm/|accelerate launch|python )", body):
            lines.append(body)
            grab = body.endswith("\\")
        elif grab:
            lines.append(body)
            grab = body.endswith("\\")
    return _join(lines)


ALL_COMMANDS = [("docs/cluster.md", c) for c in doc_commands()] + [("docs/prover.md", c) for c in prover_doc_commands()] + [
    (f"launch/slurm/{p.name}", c) for p in sorted([*SLURM.glob("*.sbatch"), SLURM / "sweep.sh"]) for c in header_commands(p)]


# ---------------------------------------------------------------------------------------------- composing


def _compose(name: str, schema, overrides: list[str], config_dir: Path | None = None):
    from verifier.config import compose

    return compose(name, schema, overrides, config_dir=config_dir)


def _launcher(overrides: list[str]) -> dict:
    """The ``hydra.launcher`` config a ``-m`` command composes (its hydra/launcher and hydra.launcher.* overrides)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from training.config import GRPORunConfig
    from verifier.config import CONFIG_DIR, register

    register("grpo", GRPORunConfig)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        c = compose("grpo", overrides=overrides, return_hydra_config=True)
    return OmegaConf.to_container(c.hydra.launcher, resolve=False)


def _sweep_points(overrides: list[str]) -> list[list[str]]:
    """A ``-m`` override list expanded into one list per job (comma lists of ``experiment=``)."""
    points = [[]]
    for o in overrides:
        k, _, v = o.partition("=")
        if k == "experiment" and "," in v:
            points = [p + [f"{k}={x}"] for p in points for x in v.split(",")]
        else:
            points = [p + [o] for p in points]
    return points


def check_grpo_run(overrides: list[str], accelerate_file: str | None = None, tmp: Path | None = None):
    """Compose a GRPO command and check the values of a real-model run (``tmp``: where the verifier cards of
    ``prover.verifier_run_dir`` are written, :func:`with_cards`)."""
    from training import grpo, prover_grpo
    from training.config import GRPORunConfig
    from training.scale import is_tiny_model

    overrides = with_cards(overrides, tmp) if tmp is not None else overrides
    cfg = _compose("grpo", GRPORunConfig, [o for o in overrides if not o.startswith(("hydra/", "hydra.", "++hydra."))])
    if cfg.prover.enabled:  # no ToyScaleError: a real model carries real-model values (each recipe's own check)
        prover_grpo.check_scale(cfg)
        return check_prover_run(cfg, accelerate_file)
    grpo.check_scale(cfg)
    if is_tiny_model(cfg.init_from or cfg.model.name_or_path):  # a tiny twin written out: CPU values
        if accelerate_file is not None:
            assert check_accelerate_file(accelerate_file, gpu=False)["use_cpu"] is True, accelerate_file
        return cfg
    assert cfg.data.source in ("jsonl", "processbench") and cfg.data.train_path, overrides
    assert not cfg.data.n_train and not cfg.data.n_eval
    from training import ladder

    ladder.check_variant_data(cfg)  # issue 27: each row its own variant's data
    ladder.check_base_model(cfg)  # issue 42: base is the SFT warm start (init_from), said explicitly
    ladder.check_thinking(cfg)  # thinking budgets for a thinking policy
    assert cfg.data.eval_path or not cfg.eval.enabled or cfg.data.source != "jsonl", f"no held-out data: {overrides}"
    if cfg.data.root:
        assert cfg.data.train_path == f"{cfg.data.root}/{cfg.data.variant}/trajectories.jsonl", overrides
    g = cfg.grpo
    if cfg.train:
        assert g.max_completion_length >= 1024 and g.max_steps >= 100 and g.save_total_limit, overrides
        assert g.bf16 is True and cfg.model.dtype == "bfloat16", overrides
    if cfg.eval.enabled:
        assert cfg.eval.judge.max_tokens >= (g.max_completion_length if cfg.train else 1024), overrides
    assert cfg.reward.meta.kind == "llm" and cfg.reward.meta.max_tokens >= 1024
    if g.use_vllm:
        assert g.vllm_mode in ("server", "colocate")
        assert (g.vllm_mode == "server") == bool(g.vllm_server_base_url), overrides
    if accelerate_file is not None:
        check_accelerate_file(accelerate_file, gpu=True)
    return cfg


def check_prover_run(cfg, accelerate_file: str | None):
    """A real-model prover GRPO run (experiment=prover_rl): real problems, budgets and precision, a verifier on
    another host (not the CPU default 127.0.0.1) judging with its card's settings (``prover.verifier_run_dir``)."""
    from verifier.card import read_card

    p, g = cfg.prover, cfg.grpo
    assert p.reward == "verifier" and p.problems and p.eval_problems and not cfg.data.n_train, cfg.overrides
    assert "127.0.0.1" not in p.verifier.base_url and "localhost" not in p.verifier.base_url, p.verifier.base_url
    assert p.verifier_run_dir, "the reward judge takes the verifier's card (prover.verifier_run_dir)"
    card = read_card(p.verifier_run_dir)
    assert (p.judge.template, p.judge.with_reference) == (card.template, card.with_reference)
    assert p.judge.max_tokens >= card.needed_max_tokens and p.verifier.model == card.served_model_name
    assert g.max_completion_length >= 1024 and g.max_steps >= 100 and g.save_total_limit
    assert g.bf16 is True and cfg.model.dtype == "bfloat16"
    if cfg.eval.enabled:
        assert cfg.eval.judge.max_tokens >= g.max_completion_length
    if g.use_vllm:
        assert (g.vllm_mode == "server") == bool(g.vllm_server_base_url)
    if accelerate_file is not None:
        check_accelerate_file(accelerate_file, gpu=True)
    return cfg


def check_accelerate_file(path: str, gpu: bool) -> dict:
    f = REPO / path
    assert f.exists(), f"accelerate config {path} does not exist"
    acc = yaml.safe_load(f.read_text())
    if gpu:
        assert acc["use_cpu"] is False, path
    if acc["distributed_type"] == "DEEPSPEED":
        ds = REPO / acc["deepspeed_config"]["deepspeed_config_file"]
        assert ds.exists(), f"{path} names a missing DeepSpeed file {ds}"
        # bf16 comes from the run (grpo.bf16 / TRL) through the JSON's "auto": accelerate refuses a
        # mixed_precision key beside a deepspeed_config_file
        assert "mixed_precision" not in acc, path
        assert json.loads(ds.read_text())["bf16"]["enabled"] == "auto", ds
    elif gpu:
        assert acc["mixed_precision"] == "bf16", path
    return acc


def check_sft_run(overrides: list[str], accelerate_file: str | None):
    from training.sft import SFTRunConfig, check_scale

    cfg = _compose("sft", SFTRunConfig, overrides)
    check_scale(cfg)
    assert cfg.data.source == "jsonl" and cfg.data.train_path and cfg.bf16 is True
    assert cfg.max_length >= 8192 and cfg.learning_rate <= 1e-4 and cfg.save_total_limit
    if accelerate_file:
        check_accelerate_file(accelerate_file, gpu=True)
    return cfg


def check_serve(overrides: list[str]):
    from verifier.serve import SERVE_CONFIG_DIR, ServeConfig

    cfg = _compose("serve", ServeConfig, overrides, config_dir=SERVE_CONFIG_DIR)
    assert cfg.kv_cache_memory_bytes is None and cfg.enforce_eager is False, "GPU serving keeps the CPU KV cache/eager"
    assert cfg.tensor_parallel_size >= 2 and (cfg.gpu_memory_utilization or 0.9) >= 0.8  # None: vLLM 0.9
    return cfg


def _accelerate(words: list[str]) -> tuple[str | None, str, list[str]]:
    """(config file, script, overrides) of ``accelerate launch [opts] SCRIPT OVERRIDES``."""
    i = words.index("launch") + 1
    cfg_file = None
    while not words[i].endswith(".py"):
        if words[i] == "--config_file":
            cfg_file = words[i + 1]
        i += 2 if words[i].startswith("--") and "=" not in words[i] else 1
    return cfg_file, words[i], words[i + 1:]


def _min_slurm_conf(tmp: Path, nodes: int) -> tuple[Path, str]:
    conf = tmp / "slurm.conf"
    names = f"gpu[01-{nodes:02d}]" if nodes > 1 else "gpu01"
    conf.write_text(f"ClusterName=doc\nSlurmctldHost=localhost\nNodeName={names} CPUs=1\nPartitionName=p Nodes={names}\n")
    return conf, names


def dry_run(script: Path, sbatch_opts: list[str], args: list[str], tmp: Path, env_extra: dict | None = None):
    """The ``step:`` lines a SLURM script prints under ``DRY_RUN=1`` for this allocation, as word lists."""
    import os

    nodes = 1
    for o in sbatch_opts:
        m = re.match(r"--nodes=(\d+)", o)
        if m:
            nodes = int(m.group(1))
    if nodes == 1 and "#SBATCH --nodes=" in script.read_text() and not any(o.startswith("--nodes") for o in sbatch_opts):
        nodes = int(re.search(r"#SBATCH --nodes=(\d+)", script.read_text()).group(1))
    conf, names = _min_slurm_conf(tmp, nodes)
    env = dict(os.environ, SLURM_CONF=str(conf), SLURM_JOB_NODELIST=names, SLURM_JOB_ID="123", DRY_RUN="1",
               VERIFIER_API_KEY="doc-key", VENV=str(Path(sys.executable).parents[1]), RUN_DIR=str(tmp / "run"),
               REPO=str(REPO), **(env_extra or {}))
    p = subprocess.run(["bash", str(script), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    steps = [shlex.split(line[len("step:"):]) for line in p.stdout.splitlines() if line.startswith("step:")]
    assert steps, p.stdout
    return steps


def check_grpo_sbatch(sbatch_opts: list[str], args: list[str], tmp: Path):
    steps = dry_run(SLURM / "grpo.sbatch", sbatch_opts, args, tmp)
    serve = next(s for s in steps if "verifier.serve" in s)
    gen = next(s for s in steps if "vllm-serve" in s)
    train = next(s for s in steps if "accelerate launch" in " ".join(s))
    i = train.index("-c")
    accel_file, n_machines, n_proc, master, _port, script, *overrides = train[i + 2:]
    assert script == "training/grpo.py"
    acc = check_accelerate_file(accel_file, gpu=True)
    assert acc["distributed_type"] == "DEEPSPEED" and int(n_machines) >= 1 and int(n_proc) == 8 * int(n_machines)
    meta_node = next(w for w in serve if w.startswith("--nodelist="))[11:]
    cfg = check_grpo_run(overrides)
    # the run talks to the servers this job started
    assert cfg.grpo.use_vllm and cfg.grpo.vllm_mode == "server"
    gen_node = next(w for w in gen if w.startswith("--nodelist="))[11:]
    gen_port = gen[gen.index("--port") + 1]
    assert cfg.grpo.vllm_server_base_url == f"http://{gen_node}:{gen_port}"
    assert gen[gen.index("--model") + 1] == cfg.model.name_or_path  # TRL serves the policy being trained
    meta_port = next(w for w in serve if w.startswith("port="))[5:]
    assert cfg.reward.meta.endpoint.base_url == f"http://{meta_node}:{meta_port}/v1"
    assert cfg.reward.meta.endpoint.model == next(w for w in serve if w.startswith("served_model_name="))[18:]
    if meta_node != gen_node:  # several nodes: the trainers are neither server node
        assert master not in (meta_node, gen_node)
    check_serve(serve[serve.index("verifier.serve") + 1:])
    return cfg


def check_prover_sbatch(sbatch_opts: list[str], args: list[str], tmp: Path):
    """prover_rl.sbatch under DRY_RUN=1: the verifier served from ``prover.verifier_run_dir`` on all interfaces with
    GPU sizes, TRL's generation server for the prover, and the prover GRPO composed against both."""
    steps = dry_run(SLURM / "prover_rl.sbatch", sbatch_opts, args, tmp)
    serve = next(s for s in steps if "verifier.serve" in s)
    gen = next(s for s in steps if "vllm-serve" in s)
    train = next(s for s in steps if "accelerate launch" in " ".join(s))
    i = train.index("-c")
    accel_file, n_machines, n_proc, master, _port, script, *overrides = train[i + 2:]
    assert script == "training/grpo.py" and "experiment=prover_rl" in overrides
    assert int(n_machines) >= 1 and int(n_proc) == 8 * int(n_machines)
    run = next(a for a in args if a.startswith("prover.verifier_run_dir="))[len("prover.verifier_run_dir="):]
    kv = {w.split("=", 1)[0]: w.split("=", 1)[1] for w in serve if "=" in w and not w.startswith("-")}
    assert kv["run_dir"] == run and kv["host"] == "0.0.0.0", serve  # servable weights, every interface
    check_serve(serve[serve.index("verifier.serve") + 1:])
    cfg = check_grpo_run(overrides, accel_file, tmp)
    ver_node = next(w for w in serve if w.startswith("--nodelist="))[11:]
    assert cfg.prover.verifier.base_url == f"http://{ver_node}:{kv['port']}/v1"
    assert cfg.prover.verifier.model == kv["served_model_name"]
    assert cfg.grpo.use_vllm and cfg.grpo.vllm_mode == "server"
    gen_node = next(w for w in gen if w.startswith("--nodelist="))[11:]
    assert cfg.grpo.vllm_server_base_url == f"http://{gen_node}:{gen[gen.index('--port') + 1]}"
    if ver_node != gen_node:  # several nodes: the trainers are neither server node
        assert master not in (ver_node, gen_node)
    return cfg


def test_prover_rl_sbatch_on_four_nodes_uses_every_gpu(tmp_path):
    """Issue 42 item 4: prover_rl.sbatch (DRY_RUN=1) on four 8-GPU nodes: the verifier (its run directory, TP x DP),
    the prover's generation server and 16 trainer ranks, each role on its own nodes, all 32 GPUs used; without
    ``prover.verifier_run_dir`` the job stops with one line naming it."""
    args = ["prover.verifier_run_dir=/scratch/sweep/pos_aug", "model=qwen3_8b_full", "init_from=/scratch/prover_sft/final",
            "prover.problems=/data/p.jsonl", "prover.eval_problems=/data/pb.csv", "output_dir=/scratch/runs/prover_rl"]
    check_prover_sbatch(["--nodes=4"], args, tmp_path)
    steps = dry_run(SLURM / "prover_rl.sbatch", ["--nodes=4"], args, tmp_path)
    serve, gen, train = (next(s for s in steps if k in " ".join(s)) for k in ("verifier.serve", "vllm-serve", "accelerate"))
    kv = {w.split("=", 1)[0]: w.split("=", 1)[1] for w in serve if "=" in w and not w.startswith("-")}
    ver_gpus = int(kv["tensor_parallel_size"]) * int(kv["data_parallel_size"])
    gen_gpus = int(gen[gen.index("--tensor_parallel_size") + 1]) * int(gen[gen.index("--data_parallel_size") + 1])
    n_proc = int(train[train.index("-c") + 4])
    assert ver_gpus + gen_gpus + n_proc == 4 * 8 and n_proc == 16
    import os

    conf, names = _min_slurm_conf(tmp_path, 4)
    env = dict(os.environ, SLURM_CONF=str(conf), SLURM_JOB_NODELIST=names, SLURM_JOB_ID="1", DRY_RUN="1",
               VERIFIER_API_KEY="k", VENV=str(Path(sys.executable).parents[1]), RUN_DIR=str(tmp_path / "r"), REPO=str(REPO))
    p = subprocess.run(["bash", str(SLURM / "prover_rl.sbatch"), "model=qwen3_8b_full"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "give prover.verifier_run_dir=DIR" in p.stderr, p.stderr


def test_grpo_sbatch_on_four_nodes_uses_every_gpu(tmp_path):
    """Issue 27: `grpo.sbatch` with DRY_RUN=1 on four 8-GPU nodes: meta-verifier TP x DP, generation TP x DP and
    the trainers' ranks add up to all 32 GPUs, each role on its own nodes."""
    steps = dry_run(SLURM / "grpo.sbatch", ["--nodes=4"], ["experiment=meta_ver_rl", "model=qwen3_8b",
                                                            "data.root=/data/grpo", "output_dir=/scratch/runs/mvrl"], tmp_path)
    serve = next(s for s in steps if "verifier.serve" in s)
    gen = next(s for s in steps if "vllm-serve" in s)
    train = next(s for s in steps if "accelerate launch" in " ".join(s))
    kv = {w.split("=", 1)[0]: w.split("=", 1)[1] for w in serve if "=" in w and not w.startswith("-")}
    meta_gpus = int(kv["tensor_parallel_size"]) * int(kv.get("data_parallel_size", 1))
    gen_gpus = int(gen[gen.index("--tensor_parallel_size") + 1]) * int(gen[gen.index("--data_parallel_size") + 1])
    i = train.index("-c")
    _accel, n_machines, n_proc, *_ = train[i + 2:]
    nodes = {"meta": {next(w for w in serve if w.startswith("--nodelist="))[11:]},
             "gen": {next(w for w in gen if w.startswith("--nodelist="))[11:]},
             "train": set(next(w for w in train if w.startswith("--nodelist="))[11:].split(","))}
    assert sum(len(v) for v in nodes.values()) == len(set().union(*nodes.values())) == 4, nodes  # no node shared
    assert meta_gpus == 8 and gen_gpus == 8 and int(n_machines) == 2 and int(n_proc) == 16
    assert meta_gpus + gen_gpus + int(n_proc) == 4 * 8  # no idle GPU
    assert "--reasoning-parser,qwen3" in " ".join(serve)  # the thinking meta-verifier's parser


def _reasoning_parser(serve: list[str]) -> str | None:
    """The ``--reasoning-parser`` a ``verifier.serve`` word list passes to vLLM (``extra_args=[...]``), or None."""
    for w in serve:
        m = re.fullmatch(r"extra_args=\[(.*)\]", w)
        if m:
            args = [a.strip() for a in m.group(1).split(",")]
            if "--reasoning-parser" in args:
                return args[args.index("--reasoning-parser") + 1]
    return None


def test_meta_verifier_sbatch_and_runbook_serve_with_the_same_reasoning_parser(tmp_path):
    """Issue 42 item 5: the standalone meta-verifier (meta_verifier.sbatch, its DRY_RUN step), the runbook's
    meta-verifier step (docs/cluster.md step 11 and every Qwen3 meta-verifier command written there) and
    grpo.sbatch's meta-verifier all serve the thinking Qwen3 judge with ``--reasoning-parser qwen3``."""
    (tmp_path / "meta").mkdir()
    (step,) = dry_run(SLURM / "meta_verifier.sbatch", [], ["Qwen/Qwen3-30B-A3B", "8001"], tmp_path / "meta")
    (tmp_path / "grpo").mkdir()
    grpo = dry_run(SLURM / "grpo.sbatch", ["--nodes=4"], ["experiment=meta_ver_rl", "model=qwen3_8b",
                                                           "data.root=/data/grpo", "output_dir=/x"], tmp_path / "grpo")
    grpo_serve = next(s for s in grpo if "verifier.serve" in s)
    docs = [shlex.split(c) for c in doc_commands() if c.startswith("python -m verifier.serve")
            and "served_model_name=meta-verifier" in c and "model=Qwen/Qwen3" in c]
    runbook = re.search(r"\*\*\d+\. The meta-verifier server\*\*.*?```bash\n(.*?)```", DOCS.read_text(), re.S)
    assert runbook and docs, "no meta-verifier step in docs/cluster.md"
    docs.append(shlex.split(_join(runbook.group(1).splitlines())[0]))
    assert _reasoning_parser(grpo_serve) == "qwen3"
    assert _reasoning_parser(step) == _reasoning_parser(grpo_serve), step
    for cmd in docs:
        assert _reasoning_parser(cmd) == _reasoning_parser(step), cmd
    # the same model the runbook serves is the script's default
    assert "model=Qwen/Qwen3-30B-A3B" in step and "model=Qwen/Qwen3-30B-A3B" in docs[-1]


FAKE_ARRAY_ID = "4242"  # the SLURM array id the recording PYTHON "submits" the ladder's rows as


def run_sweep_script(args: list[str], tmp: Path, env_extra: dict | None = None) -> list[list[str]]:
    """Run launch/slurm/sweep.sh with a PYTHON that prints its arguments: each sweep it starts, as its overrides
    (a pess_ver sweep last).

    The recording PYTHON also does what submitit does on submission of an array: it creates
    ``hydra.sweep.dir/.submitit/<array id>_<index>`` for every job of a several-experiment sweep."""
    import os

    rec = tmp / "python"
    rec.write_text(f"#!/bin/sh\nexec {sys.executable} {REPO / 'tests' / 'fake_submit.py'} {FAKE_ARRAY_ID} \"$@\"\n")
    rec.chmod(0o755)
    env = dict(os.environ, PYTHON=str(rec), POLL_S="0.1", **(env_extra or {}))
    if not any(a.startswith("hydra.sweep.dir=") for a in args):  # the submitit folders: here, not under SWEEP_DIR
        args = [*args, f"hydra.sweep.dir={tmp}/hydra"]
    p = subprocess.run(["bash", str(SLURM / "sweep.sh"), *args], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    sweeps = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("[")]
    for argv in sweeps:
        assert argv[:2] == ["training/grpo.py", "-m"]
    return sorted((argv[2:] for argv in sweeps), key=lambda o: "experiment=pess_ver" in o)  # pess_ver's last


def check_sweep(args: list[str], tmp: Path, env_extra: dict | None = None):
    """Run launch/slurm/sweep.sh with a PYTHON that prints its arguments; check every job of the ladder."""
    return check_grpo_sweep(*run_sweep_script(args, tmp, env_extra))


def check_grpo_sweep(*sweeps: list[str]):
    """The jobs of one or more ``-m`` override lists that together make the six-row ladder."""
    from launch.jobs import build_job_command

    cfgs = []
    for overrides in sweeps:
        launcher = _launcher([o for o in overrides if o.startswith(("hydra/", "hydra.", "++hydra."))] +
                             [o for o in overrides if not o.startswith(("hydra/", "hydra.", "++hydra.")) and "," not in o])
        assert launcher["_target_"].endswith("SlurmLauncher") and launcher["gpus_per_node"] == 8
        for point in _sweep_points(overrides):
            cfg = check_grpo_run(point)
            job = build_job_command(cfg.launch, [o for o in point if not o.startswith(("hydra/", "hydra.", "++hydra."))],
                                    launcher)
            assert job[1:4] == ["launch", "--config_file", str((REPO / cfg.launch.accelerate_config).resolve())]
            assert job[job.index("--num_processes") + 1] == "8"
            check_accelerate_file(cfg.launch.accelerate_config, gpu=True)
            cfgs.append(cfg)
    assert len(cfgs) == 6, "the Table 3 ladder has six runs"
    assert len({c.experiment_name for c in cfgs}) == 6
    return cfgs


FRONT = ("data_pipeline.curate", "data_pipeline.candidates", "data_pipeline.selection", "data_pipeline.annotate",
         "data_pipeline.simulated_expert", "data_pipeline.augment")


def check_front(module: str, overrides: list[str], cmd: str) -> str:
    """The front of the pipeline (runbook steps 2-7): each command composes with real-model budgets."""
    from data_pipeline.annotate import AnnotateConfig
    from data_pipeline.augment import AugmentConfig
    from data_pipeline.candidates import CandidatesConfig
    from data_pipeline.curate import CurateConfig
    from data_pipeline.selection import SelectConfig
    from data_pipeline.simulated_expert import SimulatedExpertConfig

    if module == "data_pipeline.annotate":  # the first word is the action (data_pipeline.annotate.main)
        assert overrides and overrides[0] in ("export", "import"), cmd
        overrides = [f"action={overrides[0]}", *overrides[1:]]
    name, schema = {"data_pipeline.curate": ("curate", CurateConfig),
                    "data_pipeline.candidates": ("candidates", CandidatesConfig),
                    "data_pipeline.selection": ("select", SelectConfig),
                    "data_pipeline.annotate": ("annotate", AnnotateConfig),
                    "data_pipeline.simulated_expert": ("simulated_expert", SimulatedExpertConfig),
                    "data_pipeline.augment": ("augment", AugmentConfig)}[module]
    c = _compose(name, schema, overrides)
    assert c.out, cmd
    if name == "curate":
        assert c.input and c.rules, cmd
    if name == "candidates":  # several generators, iterative revision criticised by a verifier
        assert c.problems and len(c.generators) >= 2 and len({g.model for g in c.generators}) == len(c.generators), cmd
        assert not c.temperatures or len(c.temperatures) == len(c.generators), cmd
        assert c.rounds >= 1 and c.critic == "verifier" and c.critique.n >= 1 and c.verifier.model, cmd
        assert c.max_tokens >= 1024 and (c.critique.max_tokens or 0) >= 1024, cmd
    if name == "select":  # every pass (the entropy needs them all), a budget
        assert c.trajectories and not c.judgments and c.judge.n >= 2 and not c.judge.early_stop, cmd
        assert c.budget and c.judge.max_tokens >= 1024, cmd
    if name == "annotate":
        assert c.action == "export" and c.queue, cmd
    if name == "simulated_expert":
        assert c.tasks and c.budget >= 1, cmd
    if name == "augment":  # the pessimistic check by a verifier pool (exact: the synthetic task only)
        assert c.input and c.check == "verifiers" and len(c.verifiers) >= 1, cmd
        assert c.verify.policy == "pessimistic" and c.verify.n >= 2 and c.verify.max_tokens >= 1024, cmd
        assert c.max_tokens >= 1024, cmd
    return "front"


def runbook_row(experiment: str, tmp: Path):
    """The composed config of one ladder row as the runbook's sweep (step 12, ``SWEEP_DIR=... sweep.sh``) runs it."""
    cmd = next(c for c in doc_commands() if re.match(r"SWEEP_DIR=\S+ launch/slurm/sweep.sh ", c))
    words = shlex.split(cmd)
    env = {}
    while re.match(r"^[A-Z_]+=", words[0]):
        k, _, v = words.pop(0).partition("=")
        env[k] = v
    (tmp / "sweep_row").mkdir(exist_ok=True)
    return next(c for c in check_sweep(words[1:], tmp / "sweep_row", env) if c.experiment_name == experiment)


def with_cards(overrides: list[str], tmp: Path) -> list[str]:
    """Overrides whose ``verifier_run_dir=SWEEP_DIR/<row>`` (or ``prover.verifier_run_dir=``) of the runbook points at
    the verifier card that row writes (``training.grpo.verifier_card`` of its composed config), under ``tmp``."""
    from training.grpo import verifier_card
    from verifier.card import CARD_FILE, write_card

    out = []
    for o in overrides:
        key, _, value = o.partition("=")
        if key in ("verifier_run_dir", "prover.verifier_run_dir"):
            row = tmp / "cards" / Path(value).name
            if not (row / CARD_FILE).exists():
                row.mkdir(parents=True, exist_ok=True)
                write_card(row, verifier_card(runbook_row(row.name, tmp), []))
            o = f"{key}={row}"
        out.append(o)
    return out


def compose_verifierbench(overrides: list[str], tmp: Path):
    """An ``eval.verifierbench`` command composed, with the card of its ``verifier_run_dir`` (:func:`with_cards`)."""
    from eval.verifierbench import VerifierBenchConfig

    return _compose("verifierbench", VerifierBenchConfig, with_cards(overrides, tmp))


def test_runbook_benchmark_step_judges_with_the_held_out_budgets(tmp_path):
    """Issue 42 item 5: docs/cluster.md step 15 (``eval.verifierbench`` on the served pos_aug verifier) judges with the
    budgets of the ladder's own held-out evaluation (``training.heldout.heldout_config`` of the sweep's pos_aug row):
    the verifier's ``judge.max_tokens`` (one default, ``training.config.HELDOUT_MAX_TOKENS``, through the run's card)
    and the meta-verifier's ``meta.endpoint.max_tokens`` / ``timeout_s`` (the reward's, ``profile=cluster``)."""
    from training.config import HELDOUT_MAX_TOKENS, GRPORunConfig
    from training.heldout import heldout_config

    (cmd,) = [c for c in doc_commands() if c.startswith("python -m eval.verifierbench")]
    bench = compose_verifierbench(shlex.split(cmd)[3:], tmp_path)
    row = runbook_row("pos_aug", tmp_path)
    held = heldout_config(row, tmp_path / "heldout", tmp_path / "held_out.jsonl", "/scratch/sweep/pos_aug/final")
    assert HELDOUT_MAX_TOKENS == 16384 and GRPORunConfig().eval.judge.max_tokens == HELDOUT_MAX_TOKENS
    assert bench.judge.max_tokens == held.judge.max_tokens == row.eval.judge.max_tokens == HELDOUT_MAX_TOKENS
    assert bench.judge.max_tokens >= row.grpo.max_completion_length

    def meta_budget(c):  # the endpoint's max_tokens wins over the caller's
        return c.meta.endpoint.max_tokens or c.meta.max_tokens

    assert meta_budget(bench) == meta_budget(held) == 8192, (meta_budget(bench), meta_budget(held))
    assert bench.meta.endpoint.timeout_s == held.meta.endpoint.timeout_s
    assert bench.meta.kind == held.meta.kind == "llm" and bench.meta.endpoint.model == held.meta.endpoint.model


def check_command(cmd: str, tmp: Path) -> str:
    """Compose one written command; returns what it was checked as."""
    words = shlex.split(cmd)
    env = {}
    while re.match(r"^[A-Z_]+=", words[0]):  # VAR=value prefixes (the environment of a script)
        k, _, v = words.pop(0).partition("=")
        env[k] = v
    if words[:3] == ["python3", "-m", "venv"] or words[0] == "source":
        return "setup"
    if words[:2] == ["pip", "install"]:
        extras = re.search(r"\[(.*)\]", words[-1]).group(1).split(",")
        declared = re.search(r"\[project.optional-dependencies\](.*?)\n\[", (REPO / "pyproject.toml").read_text(), re.S)
        for e in extras:
            assert re.search(rf"^{e} = ", declared.group(1), re.M), f"pip extra [{e}] not in pyproject.toml"
        return "install"
    if words[:2] == ["accelerate", "launch"]:
        cfg_file, script, overrides = _accelerate(words)
        if script == "training/grpo.py":
            cfg = check_grpo_run(overrides, cfg_file, tmp)
            return "prover grpo" if cfg.prover.enabled else "grpo"
        if script == "training/sft.py":
            check_sft_run(overrides, cfg_file)
            return "sft"
    if words[:2] == ["python", "training/grpo.py"]:
        assert words[2] == "-m", cmd
        check_grpo_sweep(words[3:])
        return "sweep"
    if words[:3] == ["python", "-m", "verifier.serve"]:
        check_serve(words[3:])
        return "serve"
    if words[0] == "launch/serve_verifier.sh":  # model="$1" port="$2" "$@" (the script's exec line)
        assert 'exec python -m verifier.serve model="$MODEL" port="$PORT" "$@"' in (REPO / words[0]).read_text()
        check_serve([f"model={words[1]}", f"port={words[2]}", *words[3:]])
        return "serve"
    if words[:3] == ["python", "-m", "eval.proverbench"]:  # several verifier servers behind one endpoint
        from eval.proverbench import ProverBenchConfig

        c = _compose("proverbench", ProverBenchConfig, with_cards(words[3:], tmp))
        assert len(c.verifier.urls) >= 1 and c.judge.n == 8 and c.judge.policy == "pessimistic", cmd
        for ep in (c.verifier, c.generator):
            assert "127.0.0.1" not in ep.base_url and "localhost" not in ep.base_url, cmd
        return "proverbench"
    if words[:3] == ["python", "-m", "eval.report"]:
        from eval.report import ReportConfig

        _compose("report", ReportConfig, words[3:])
        return "report"
    if words[0] == "sbatch":
        i = next(i for i, w in enumerate(words) if w.startswith("launch/slurm/"))
        opts, script, args = words[1:i], words[i], words[i + 1:]
        if script.endswith("prover_rl.sbatch"):
            check_prover_sbatch(opts, args, tmp)
            return "sbatch prover"
        if script.endswith("grpo.sbatch"):
            check_grpo_sbatch(opts, args, tmp)
            return "sbatch grpo"
        if script.endswith("meta_verifier.sbatch"):
            (step,) = dry_run(REPO / script, opts, args, tmp)
            check_serve(step[step.index("verifier.serve") + 1:])
            return "sbatch meta"
    if words[0] == "launch/slurm/sweep.sh":
        cfgs = check_sweep(words[1:], tmp, env)
        if "SWEEP_DIR" in env:  # the report reads where the sweep writes
            assert {c.output_dir for c in cfgs} == {f"{env['SWEEP_DIR']}/{c.experiment_name}" for c in cfgs}
        return "sweep.sh"
    if words[:2] == ["python", "-m"] and words[2] in ("data_pipeline.ingest", "data_pipeline.splits",
                                                       "data_pipeline.grpo_dataset"):
        from data_pipeline.grpo_dataset import GrpoDataConfig
        from data_pipeline.ingest import IngestConfig
        from data_pipeline.splits import SplitConfig

        name, schema = {"data_pipeline.ingest": ("ingest", IngestConfig), "data_pipeline.splits": ("split", SplitConfig),
                        "data_pipeline.grpo_dataset": ("grpo_data", GrpoDataConfig)}[words[2]]
        c = _compose(name, schema, words[3:])
        assert c.out, cmd
        if name == "grpo_data":  # the layout data.root reads: ROOT/<variant>, held-out beside it
            assert Path(c.out).name == c.variant and c.held_out == f"{Path(c.out).parent}/held_out.jsonl", cmd
        return "data"
    if words[:2] == ["python", "-m"] and words[2] in FRONT:
        return check_front(words[2], words[3:], cmd)
    if words[:3] == ["python", "-m", "eval.verifierbench"]:
        from verifier.serve import RUN_SERVED_NAME

        c = compose_verifierbench(words[3:], tmp)
        assert c.verifier.model == RUN_SERVED_NAME and c.meta.endpoint.model == "meta-verifier", cmd
        return "verifierbench"
    if words[:2] == ["trl", "vllm-serve"]:  # TRL's generation server: the policy and its parallelism
        assert words[words.index("--model") + 1], cmd
        if "--tensor_parallel_size" in words:
            assert int(words[words.index("--tensor_parallel_size") + 1]) >= 1
        return "trl vllm-serve"
    if words[0] == "launch/gpu_check.sh" or words[:2] == ["python", "launch/gpu_check.py"]:  # the GPU node check
        gpu_check = _gpu_check()
        assert 'exec "$PY" launch/gpu_check.py "$@"' in (REPO / "launch" / "gpu_check.sh").read_text()
        gpu_check.parse_args([*words[1 if words[0].endswith(".sh") else 2:], "--out", str(tmp / "gpu_check")])
        return "gpu check"
    if words[:3] == ["pip", "download", "--no-deps"]:  # the wheels carried to a GPU node: small ones, the venv's
        gpu_check = _gpu_check()
        for pin in (w for w in words[3:] if "==" in w):
            name, _, version = pin.partition("==")
            assert name in gpu_check.SMALL_WHEELS and md.version(name) == version, pin
        return "wheels"
    if words[0] == "make":
        for target in words[1:]:
            assert re.search(rf"^{re.escape(target)}:", (REPO / "Makefile").read_text(), re.M), f"no make target {target}"
        return "make"
    raise AssertionError(f"no check for this command (add one, or it is untested): {cmd}")


def _gpu_check():
    """launch/gpu_check.py as a module (it is a script: launch/ is no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "launch" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("where,cmd", ALL_COMMANDS, ids=[f"{w}:{c[:60]}" for w, c in ALL_COMMANDS])
def test_every_written_cluster_command_composes(where, cmd, tmp_path):
    check_command(cmd, tmp_path)


def test_the_written_commands_cover_every_kind(tmp_path):
    """The extraction finds the commands (a broken parser would pass vacuously)."""
    kinds = set()
    for i, (_, c) in enumerate(ALL_COMMANDS):
        (tmp_path / str(i)).mkdir()
        kinds.add(check_command(c, tmp_path / str(i)))
    assert {"grpo", "sft", "serve", "sweep", "sweep.sh", "sbatch grpo", "sbatch meta", "report", "install", "proverbench",
            "front", "gpu check", "wheels"} <= kinds
    assert any(w.startswith("launch/slurm/grpo.sbatch") for w, _ in ALL_COMMANDS)
    assert any(w.startswith("launch/slurm/sweep.sh") for w, _ in ALL_COMMANDS)


def test_prover_docs_cluster_commands_cover_the_prover_path(tmp_path):
    """Issue 42 item 4: docs/prover.md's cluster section serves the verifier and the trained prover from their run
    directories (servable weights: ``run_dir=``, not a LoRA adapter's ``final/``) on all interfaces with GPU sizes,
    trains the prover (accelerate and the SLURM recipe) against the served verifier with its card, and scores it."""
    kinds = []
    for i, c in enumerate(prover_doc_commands()):
        (tmp_path / str(i)).mkdir()
        kinds.append(check_command(c, tmp_path / str(i)))
    assert {"serve", "prover grpo", "sbatch prover", "proverbench"} <= set(kinds), kinds
    serves = [dict(w.split("=", 1) for w in shlex.split(c)[3:]) for c in prover_doc_commands()
              if c.startswith("python -m verifier.serve")]
    assert all(s.get("run_dir") and "model" not in s and s["host"] == "0.0.0.0" for s in serves), serves
    assert any(s.get("served_model_name") == "prover" for s in serves), "no serve command for the prover"
    assert any(c.startswith("sbatch") and "launch/slurm/prover_rl.sbatch" in c for c in prover_doc_commands())


def test_sweep_script_defaults_build_accelerate_jobs(tmp_path):
    """sweep.sh with only the required values: profile=cluster, ZeRO-2, six jobs through accelerate launch."""
    cfgs = check_sweep(["model=qwen3_8b", "init_from=/scratch/runs/sft/final", "data.root=/data/grpo"], tmp_path)
    assert {c.launch.accelerate_config for c in cfgs} == {"launch/accelerate/zero2.yaml"}
    cfgs = check_sweep(["model=qwen3_8b_full", "init_from=/scratch/runs/sft/final", "data.root=/data/grpo"], tmp_path,
                       {"ACCEL_CONFIG": "launch/accelerate/zero3.yaml"})
    assert {c.launch.accelerate_config for c in cfgs} == {"launch/accelerate/zero3.yaml"}


def test_sweep_submits_pess_ver_after_pos_aug_with_a_slurm_dependency(tmp_path):
    """Issue 42 item 2: sweep.sh on SLURM submits the five other rows as one array, then pess_ver as its own job with
    ``--dependency=afterok:<pos_aug's array task>`` (and cancelled if pos_aug fails), not waiting on 8 GPUs; the
    dependency reaches SLURM as ``#SBATCH`` lines of the job submitit writes."""
    from submitit.slurm.slurm import _make_sbatch_string

    rows, pess = run_sweep_script(["model=qwen3_8b", "init_from=/scratch/runs/sft/final", "data.root=/data/grpo"],
                                  tmp_path, {"SWEEP_DIR": "/scratch/sweep"})
    assert "experiment=base,rough_rl,meta_ver_rl,extra_ann,pos_aug" in rows and "experiment=pess_ver" in pess
    assert f"hydra.sweep.dir={tmp_path}/hydra/rows" in rows and f"hydra.sweep.dir={tmp_path}/hydra/pess_ver" in pess
    # pos_aug is the array's task 4: pess_ver depends on it
    assert f"++hydra.launcher.additional_parameters.dependency=afterok:{FAKE_ARRAY_ID}_4" in pess
    assert "evaluate_run_wait_s=0" in pess  # nothing to wait for once it starts
    cfgs = check_grpo_sweep(rows, pess)
    assert {c.init_from for c in cfgs if c.experiment_name != "pess_ver"} == {"/scratch/runs/sft/final"}
    (pv,) = [c for c in cfgs if c.experiment_name == "pess_ver"]
    assert pv.evaluate_run_wait_s == 0 and pv.output_dir == "/scratch/sweep/pess_ver"
    launcher = _launcher([o for o in pess if o.startswith(("hydra/", "hydra.", "++hydra."))])
    assert "dependency" not in _launcher(["hydra/launcher=slurm"])["additional_parameters"]
    assert launcher["additional_parameters"] == {"dependency": f"afterok:{FAKE_ARRAY_ID}_4",
                                                 "kill_on_invalid_dep": "yes"}
    sbatch = _make_sbatch_string(command="python -u -m submitit.core._submit F", folder=str(tmp_path / "sub"),
                                 additional_parameters=launcher["additional_parameters"])
    assert f"#SBATCH --dependency=afterok:{FAKE_ARRAY_ID}_4" in sbatch and "#SBATCH --kill-on-invalid-dep=yes" in sbatch
    # off SLURM (local processes, one after the other) or without pess_ver: one sweep as before
    (one,) = run_sweep_script(["model=qwen3_8b", "data.root=/data/grpo"], tmp_path, {"LAUNCHER": "slurm_local"})
    assert "experiment=base,rough_rl,meta_ver_rl,extra_ann,pos_aug,pess_ver" in one
    # run again (the same sweep dir): the new array's pos_aug, not the earlier run's
    _, pess = run_sweep_script(["model=qwen3_8b", "init_from=/scratch/runs/sft/final", "data.root=/data/grpo"],
                               tmp_path, {"SWEEP_DIR": "/scratch/sweep"})
    assert f"++hydra.launcher.additional_parameters.dependency=afterok:{int(FAKE_ARRAY_ID) + 1}_4" in pess
    # pos_aug alone before pess_ver: submitit submits it as a plain job, its id is the dependency
    (tmp_path / "two").mkdir()
    _, pess = run_sweep_script(["model=qwen3_8b"], tmp_path / "two", {"EXPERIMENTS": "pos_aug,pess_ver"})
    assert f"++hydra.launcher.additional_parameters.dependency=afterok:{FAKE_ARRAY_ID}" in pess
    (one,) = run_sweep_script(["model=qwen3_8b"], tmp_path, {"EXPERIMENTS": "base,pos_aug"})
    assert "experiment=base,pos_aug" in one and not any("dependency" in o for o in one)


def test_sweep_script_fails_when_the_rows_sweep_fails_before_pos_aug_is_submitted(tmp_path):
    """sweep.sh stops with the rows sweep's exit status, without submitting pess_ver, if that sweep ends first."""
    import os

    rec = tmp_path / "python"
    rec.write_text("#!/bin/sh\necho \"$@\" >> " + str(tmp_path / "calls") + "\nexit 3\n")
    rec.chmod(0o755)
    p = subprocess.run(["bash", str(SLURM / "sweep.sh"), "model=qwen3_8b", f"hydra.sweep.dir={tmp_path}/h"], cwd=REPO,
                       env=dict(os.environ, PYTHON=str(rec), POLL_S="0.1"), capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and "pess_ver not submitted" in p.stderr
    assert (tmp_path / "calls").read_text().count("training/grpo.py") == 1


def test_sweep_jobs_generate_with_vllm_and_resume_when_requeued(tmp_path, monkeypatch):
    """Issue 27 item 5 (what runs on CPU): the sweep's jobs use TRL's vLLM generation (colocate, on the jobs'
    GPUs), the SLURM launcher requeues on timeout/preemption, and a (re)started job runs with resume=true."""
    import subprocess as sp

    from launch import jobs
    from training.config import GRPORunConfig

    cfgs = check_sweep(["model=qwen3_8b", "init_from=/scratch/runs/sft/final", "data.root=/data/grpo"], tmp_path)
    assert all(c.grpo.use_vllm and c.grpo.vllm_mode == "colocate" for c in cfgs)
    launcher = _launcher(["hydra/launcher=slurm"])
    assert launcher["max_num_timeout"] >= 1 and launcher["signal_delay_s"] >= 60
    seen = []
    monkeypatch.setattr(sp, "run", lambda cmd, **kw: seen.append(cmd) or sp.CompletedProcess(cmd, 0))
    cfg = GRPORunConfig(overrides=["experiment=meta_ver_rl", "output_dir=/x/meta_ver_rl"])
    jobs.launch_job(cfg, {"gpus_per_node": 8, "nodes": 1})
    assert seen[0][-3:] == ["experiment=meta_ver_rl", "output_dir=/x/meta_ver_rl", "resume=true"]
    seen.clear()
    jobs.launch_job(GRPORunConfig(overrides=["resume=false"]), {"gpus_per_node": 8, "nodes": 1})
    assert seen[0][-1] == "resume=false"  # an explicit choice is kept


def test_submitit_job_command_is_accelerate_launch(tmp_path):
    """What a submitit job runs: accelerate launch with the configured file and gpus_per_node x nodes processes."""
    from launch.jobs import build_job_command
    from training.config import LaunchSettings

    over = ["profile=cluster", "experiment=base", "output_dir=/x/${experiment_name}"]
    one = build_job_command(LaunchSettings("launch/accelerate/zero3.yaml"), over, {"gpus_per_node": 8, "nodes": 1},
                            env={"SLURM_JOB_ID": "4242"})
    assert Path(one[0]).name == "accelerate" and one[1] == "launch"
    assert one[one.index("--config_file") + 1] == str(REPO / "launch/accelerate/zero3.yaml")
    assert one[one.index("--num_processes") + 1] == "8" and "--num_machines" not in one
    assert one[one.index("--main_process_port") + 1] == str(20000 + 4242 % 20000)
    assert one[-4:] == [str(REPO / "training/grpo.py"), *over]
    two = build_job_command(LaunchSettings("launch/accelerate/multinode_zero3.yaml"), over,
                            {"gpus_per_node": 8, "nodes": 2}, node_rank=1, hostnames=["gpu07", "gpu08"])
    assert two[two.index("--num_processes") + 1] == "16" and two[two.index("--num_machines") + 1] == "2"
    assert two[two.index("--machine_rank") + 1] == "1" and two[two.index("--main_process_ip") + 1] == "gpu07"
    cpu = build_job_command(LaunchSettings("launch/accelerate/cpu.yaml"), over, {"gpus_per_node": 0, "nodes": 1})
    assert "--num_processes" not in cpu  # the file's own count (one CPU process)
    with pytest.raises(FileNotFoundError, match="no-such.yaml"):
        build_job_command(LaunchSettings("launch/accelerate/no-such.yaml"), over, {"gpus_per_node": 8})


# ---------------------------------------------------------------------------------------------- profiles


def test_real_model_with_tiny_values_stops_before_loading(tmp_path, monkeypatch):
    """model=qwen3_8b on the default (cpu_tiny) profile: one error naming every offending key, nothing loaded."""
    import training.grpo as grpo
    from training import trainer
    from training.config import GRPORunConfig
    from training.scale import ToyScaleError, toy_values

    def boom(*a, **k):
        raise AssertionError("loaded something before the scale check")

    monkeypatch.setattr(trainer, "load_model", boom)
    monkeypatch.setattr(grpo, "load_trajectories_for", boom)
    cfg = _compose("grpo", GRPORunConfig, ["experiment=meta_ver_rl", "model=qwen3_8b", f"output_dir={tmp_path / 'r'}"])
    with pytest.raises(ToyScaleError) as e:
        grpo.run(cfg)
    msg = str(e.value)
    for key in ("data.source=synthetic", "data.n_train=64", "data.n_eval=32", "grpo.max_completion_length=32",
                "eval.judge.max_tokens=32", "profile=cluster", "Qwen/Qwen3-8B"):
        assert key in msg, key
    assert not (tmp_path / "r").exists()  # stopped before writing anything
    # each key alone is caught; the eval budget below the completion budget too
    base = ["profile=cluster", "model=qwen3_8b", "data.train_path=/d.jsonl"]
    assert toy_values(_compose("grpo", GRPORunConfig, base)) == []
    for over, key in [("data.source=synthetic", "data.source"), ("data.train_path=null", "data.train_path"),
                      ("data.n_train=100", "data.n_train"), ("grpo.max_completion_length=64", "grpo.max_completion_length"),
                      ("eval.judge.max_tokens=2048", "eval.judge.max_tokens=2048 (below")]:
        bad = toy_values(_compose("grpo", GRPORunConfig, [*base, over]))
        assert len(bad) == 1 and key in bad[0], (over, bad)
    # an SFT output or any other path: the check looks at the model that would be loaded (init_from first)
    with pytest.raises(ToyScaleError, match="init_from|/ckpt/sft"):
        grpo.check_scale(_compose("grpo", GRPORunConfig, ["init_from=/ckpt/sft"]))


def test_tiny_model_runs_keep_the_cpu_tiny_values(tiny_model):
    """profile=cpu_tiny is today's tiny setting, and the tiny model (by path or by size) passes the check."""
    from training.config import GRPORunConfig
    from training.grpo import check_scale
    from training.scale import is_tiny_model

    cfg = _compose("grpo", GRPORunConfig, ["experiment=smoke", f"model.name_or_path={tiny_model}"])
    check_scale(cfg)
    assert is_tiny_model(str(tiny_model)) and is_tiny_model("artifacts/tiny-model")
    assert not is_tiny_model("Qwen/Qwen3-8B")
    g = cfg.grpo
    assert (cfg.data.source, cfg.data.n_train, cfg.data.n_eval) == ("synthetic", 16, 8)
    assert (g.max_steps, g.save_steps, g.per_device_train_batch_size, g.num_generations, g.max_completion_length,
            g.gradient_accumulation_steps, g.bf16) == (4, 2, 4, 4, 16, 1, False)
    assert cfg.launch.accelerate_config == "launch/accelerate/cpu.yaml"
    ladder = {e: _compose("grpo", GRPORunConfig, [f"experiment={e}"]) for e in ("base", "extra_ann", "pos_aug")}
    assert [ladder[e].data.n_train for e in ladder] == [64, 128, 160]
    assert ladder["base"].grpo.max_steps == 8 and ladder["base"].eval.judge.max_tokens == 32


def test_dataclass_defaults_are_not_toy_values():
    """A run built in Python with a real model and a data path passes the check on the dataclass defaults."""
    from training.config import DataConfig, GRPORunConfig, ModelConfig
    from training.scale import toy_values
    from training.sft import SFTRunConfig
    from training.sft import toy_values as sft_toy

    cfg = GRPORunConfig(model=ModelConfig(name_or_path="Qwen/Qwen3-8B"), data=DataConfig(train_path="/d.jsonl"))
    assert toy_values(cfg) == []
    assert cfg.grpo.bf16 is None and cfg.grpo.save_total_limit  # None: TRL's bf16-unless-fp16
    assert sft_toy(SFTRunConfig(data=DataConfig(train_path="/d.jsonl"))) == []


def test_bf16_is_not_passed_when_unset(tmp_path):
    from training.config import GRPORunConfig
    from training.trainer import grpo_config

    cfg = _compose("grpo", GRPORunConfig, ["experiment=smoke", f"output_dir={tmp_path}", "grpo.bf16=null"])
    with pytest.raises(ValueError, match="bf16"):  # TRL's own default (bf16) took over: on this CPU it refuses
        grpo_config(cfg, tmp_path, [1.0], report_wandb=False)
    cfg = _compose("grpo", GRPORunConfig, ["experiment=smoke", f"output_dir={tmp_path}"])
    assert grpo_config(cfg, tmp_path, [1.0], report_wandb=False).bf16 is False  # cpu_tiny: fp32 on CPU


# ---------------------------------------------------------------------------------------------- versions


def test_version_table_matches_the_venv():
    """The CPU column of docs/cluster.md's version table is what this venv has installed."""
    table = re.search(r"\| package \| CPU \(tested\) \| GPU \(recommended\) \|\n\|[-|]+\|\n(.*?)\n\n", DOCS.read_text(), re.S)
    assert table, "no version table in docs/cluster.md"
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.group(1).splitlines()]
    checked = 0
    for pkg, cpu, _gpu in rows:
        name = pkg.split(" / ")[0]
        if name == "slurm-wlm (Debian 12)":
            continue
        want = cpu.split(" ")[0]
        assert md.version(name) == want, f"{name}: docs say {want}, venv has {md.version(name)}"
        checked += 1
    assert checked >= 10
