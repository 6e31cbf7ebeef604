"""training/loop.py (``python -m training.loop``): options checked in one line before work, a 2-round loop at the
tiniest budgets writes each round's held-out figures and the report, a loop killed half-way resumes without redoing
its finished stages; bench/bench_loop.py's last line.

Every served model is one stand-in OpenAI-compatible server (the loop's ``serve`` hook): it writes the task's gold
proof or a proof with a wrong first result, and random parseable verdicts, in milliseconds. The trainings (SFT,
prover and verifier GRPO) are real, on the tiny model. These tests check the loop's plumbing, not its learning;
the vLLM path of every stage is the one ``make bench-loop`` and the stages' own tests run."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from training.loop import HELDOUT_KEYS, LoopConfig, check_config, check_disjoint, gold_steps, problem_sets
from training.loop import run as run_loop
from verifier.errors import InputError
from verifier.formats import ProofProblem
from verifier.results import WandbConfig

REPO = Path(__file__).resolve().parents[1]
TINY = dict(n_prover_sft=16, prover_sft_steps=2, sft_batch=4, n_round_problems=3, n_heldout=3, k=1, grpo_steps=1,
            grpo_batch=4, num_generations=2, max_completion_length=24, reward_passes=2, audit_every=1,
            n_verifier_sft=16, verifier_sft_steps=2, verifier_max_tokens=40, n_base=8, refresh_sft_steps=1,
            verifier_grpo_steps=1, budget=2, select_passes=2, eval_passes=2, eval_proofs=2, bootstrap_n=20, progress=False)


def _cfg(out: Path, model: Path, **kw) -> LoopConfig:
    return LoopConfig(out=str(out), base_model=str(model), wandb=WandbConfig(enabled=False), **{**TINY, **kw})


MODEL = "stand-in"


def _answer(prompt: str, rng: random.Random) -> str:
    """What the stand-in writes: a verdict for a verification prompt, else a proof of the prompt's problem."""
    from data_pipeline.synthetic_check import gold_proof, proof_text
    from verifier.parser import format_meta_verification, format_verification

    if prompt.startswith("You are a meta-verifier"):  # autolabel's meta-verification of an analysis
        return format_meta_verification("BASIC_MATCH" if rng.random() < 0.7 else "POOR_MATCH", "Checked it.")
    if prompt.startswith("Verify the proof"):
        steps = len(re.findall(r"^Step \d+:", prompt, re.M))
        bad = rng.random() < 0.5
        return format_verification("invalid" if bad else "valid", rng.randrange(max(1, steps)) if bad else -1,
                                   "Checked every step.")
    m = re.search(r"(Compute [^\n]*?\.)", prompt)
    if not m:
        return "Step 0: nothing to say."
    steps = gold_proof(m.group(1))
    if rng.random() < 0.5:  # a wrong first result (the error a prover makes and a planted-error verifier misses)
        steps[0] = re.sub(r"= (-?\d+)$", lambda x: f"= {int(x.group(1)) + 1}", steps[0])
    return proof_text(steps)


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def _send(self, doc):
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 (http.server's name)
        self._send({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "test"}]})

    def do_POST(self):  # noqa: N802
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = req["messages"][-1]["content"]
        seed = int(hashlib.sha256(f"{prompt}|{req.get('seed')}".encode()).hexdigest()[:12], 16)
        rng = random.Random(seed)
        choices = [{"index": i, "message": {"role": "assistant", "content": _answer(prompt, rng)},
                    "finish_reason": "stop"} for i in range(int(req.get("n") or 1))]
        self._send({"id": "x", "object": "chat.completion", "created": 0, "model": MODEL, "choices": choices,
                    "usage": {"prompt_tokens": 10, "completion_tokens": 10 * len(choices), "total_tokens": 20}})


@pytest.fixture(scope="module")
def stand_in():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


def _serve(url: str):
    from verifier.config import EndpointConfig

    ep = EndpointConfig(base_url=url, api_key="k", model=MODEL, max_concurrency=8, timeout_s=60, max_retries=1)
    return lambda name, model: ep


# ------------------------------------------------------------------ (i) options: one clear line, before work
def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "training.loop", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env=env)


def test_bad_options_are_one_line_before_work(tmp_path):
    out = tmp_path / "loop"
    r = _cli(f"out={out}", "annotator=oracle")  # the command: exit 2, one line
    assert r.returncode == 2 and "field 'annotator'" in r.stderr, r.stderr[-800:]
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not out.exists()
    for bad, what in ({"rounds": 0}, "field 'rounds'"), ({"grpo_batch": 5}, "field 'grpo_batch'"), ({"reward_policy": "max"}, "field 'reward_policy'"), \
            ({"annotator": "export:"}, "field 'annotator'"), ({"autolabel_k": 9}, "field 'autolabel_k'"), \
            ({"eval_proofs": 0}, "field 'eval_proofs'"):
        with pytest.raises(InputError, match=what) as e:
            check_config(LoopConfig(out=str(out), **bad))
        assert "\n" not in str(e.value)


def test_overlapping_problem_sets_are_one_error_naming_them():
    a, b = ProofProblem("p1", "Compute 1 + 2."), ProofProblem("p2", "Compute 2 + 2.")
    with pytest.raises(InputError, match=r"problem sets overlap: held-out and round 1 share 1 problems"):
        check_disjoint({"prover SFT": [a], "held-out": [b], "round 1": [ProofProblem("q", "Compute 2 + 2.")]})
    check_disjoint({"prover SFT": [a], "held-out": [b]})
    sets = problem_sets(LoopConfig(out="x", rounds=2, n_prover_sft=200, n_round_problems=20, n_heldout=10))
    assert list(sets) == ["prover SFT", "held-out", "round 0", "round 1", "round 2"]
    texts = [p.problem for ps in sets.values() for p in ps]
    assert len(texts) == len(set(texts))  # disjoint by construction
    with pytest.raises(InputError, match=r"only \d+ of 3 held-out problems outside the earlier sets \(prover SFT\)"):
        problem_sets(LoopConfig(out="x", rounds=1, max_operand=2, n_prover_sft=50, n_heldout=3))


# ------------------------------------------------------------------ (ii) a 2-round loop
@pytest.fixture(scope="module")
def two_rounds(tmp_path_factory, tiny_model, stand_in):
    out = tmp_path_factory.mktemp("loop") / "expert"
    report = run_loop(_cfg(out, tiny_model, rounds=2), serve=_serve(stand_in))
    return out, report


def test_two_rounds_write_heldout_and_report(two_rounds):
    out, report = two_rounds
    for r in range(3):
        doc = json.loads((out / f"round_{r}" / "heldout.json").read_text())
        assert set(HELDOUT_KEYS) <= set(doc) and doc["round"] == r, doc.keys()
        assert doc["n"] == 6 and 0.0 <= doc["true_acc"] <= 1.0 and "exploit_rate" in doc
        stages = ("prover_sft", "verifier", "prover", "heldout") if r == 0 else (
            "proofs", "selection", "annotate", "augment", "verifier", "check", "prover", "heldout")
        for s in stages:
            assert (out / f"round_{r}" / s / "loop_done.json").is_file(), (r, s)
    ann = json.loads((out / "round_1" / "annotate" / "result.json").read_text())
    assert ann["labelled"] >= 1 and (out / "round_1" / "annotate" / "expert" / "export.json").is_file()
    v2 = json.loads((out / "round_2" / "verifier" / "result.json").read_text())
    assert v2["extra"] >= 2 and v2["variant"] in ("extra_ann", "pos_aug")  # rounds 1 and 2's annotations
    # the check before the prover trains: both verifiers on the round's 3 proofs (k=1), exact truth for each
    chk = json.loads((out / "round_1" / "check" / "result.json").read_text())
    cands = [json.loads(x) for x in (out / "round_1" / "proofs" / "candidates.jsonl").open()]
    from data_pipeline.synthetic_check import check_proof
    n_true = sum(check_proof(c["problem"], c["proof_steps"]).true for c in cands)
    for v in ("new", "previous"):
        ex, an = chk[v]["exact"], chk[v]["annotation"]
        assert (ex["true"], ex["false"], chk[v]["not_judged"]) == (n_true, len(cands) - n_true, 0), chk
        assert an["true"] + an["false"] == ann["labelled"] and an["unlabelled"] == len(cands) - ann["labelled"]
        assert (out / "round_1" / "check" / f"judgments_{v}.jsonl").is_file()
    r1 = json.loads((out / "round_1" / "verifier" / "result.json").read_text())["verifier"]
    r0 = json.loads((out / "round_0" / "verifier" / "result.json").read_text())["verifier"]
    assert (chk["new"]["model"], chk["previous"]["model"]) == (r1, r0) and r1 != r0
    h1 = json.loads((out / "round_1" / "heldout.json").read_text())
    assert h1["check_tpr"] == chk["new"]["exact"]["tpr"] and h1["check_previous_tnr"] == chk["previous"]["exact"]["tnr"]
    md = (out / "report.md").read_text()
    assert "| round |" in md and md.count("\n| 2 |") == 1 and "paired on 6 proofs" in md and "check TPR %" in md
    assert (out / "loop.png").stat().st_size > 1000 and report["true_gain"]["n"] == 6 and report["true_gain"]["problems"] == 3


def test_decision_rates_on_hand_made_judgments():
    """``decision_rates``: decisions and single passes against labels; unlabelled proofs left out and counted."""
    from training.loop import decision_rates
    from verifier.aggregate import AggregationPolicy, aggregate
    from verifier.judgment import Judgment
    from verifier.parser import format_verification, parse_verification

    def j(*passes: str) -> Judgment:
        outs = [parse_verification(format_verification(p, -1 if p == "valid" else 0, "r")) for p in passes]
        return Judgment("x", aggregate(outs, AggregationPolicy(n=len(outs))), outs, n=len(outs))

    js = [j("valid", "valid"), j("valid", "invalid"), j("invalid", "invalid"), j("valid", "valid"),
          j("invalid", "invalid"), j("valid", "valid")]
    r = decision_rates(js, [True, True, False, False, False, None])
    assert (r["true"], r["false"], r["unlabelled"]) == (2, 3, 1)
    assert (r["tpr"], r["tnr"]) == (0.5, 2 / 3)  # all-valid passes accept: 1 of 2 true proofs, 1 of 3 false ones
    assert (r["pass_tpr"], r["pass_tnr"]) == (0.75, 4 / 6)  # 3 of 4 passes on true proofs accept, 4 of 6 on false reject
    assert (r["accept_true"], r["accept_false"]) == (0.75, 2 / 6)
    empty = decision_rates([], [])
    assert empty["tpr"] is None and empty["true"] == 0


def test_sft_control_is_in_the_report(two_rounds, stand_in):
    """The SFT prover on the held-out problems (``OUT/sft``), in the report beside the rounds, with the last round's
    paired gain over it; resumed, not redone."""
    from training.loop import Loop, write_report

    out, _ = two_rounds
    cfg = json.loads((out / "round_0" / "prover_sft" / "loop_done.json").read_text())
    loop = Loop(_cfg(out, Path(cfg["base_model"]), rounds=2), serve=_serve(stand_in))
    doc = loop.sft_control()
    assert doc["arm"] == "sft" and doc["n"] == 6 and set(doc["per_proof"]) == set(
        json.loads((out / "round_2" / "heldout.json").read_text())["per_proof"])
    served = json.loads((out / "sft" / "heldout" / "proofs.jsonl").open().readline())
    assert served["problem"] in {json.loads(x)["problem"] for x in (out / "problems" / "held_out.jsonl").open()}
    mtime = (out / "sft" / "loop_done.json").stat().st_mtime_ns
    assert loop.sft_control()["true_acc"] == doc["true_acc"] and (out / "sft" / "loop_done.json").stat().st_mtime_ns == mtime
    rep = write_report(out, 2, 20, 0)
    assert rep["sft_gain"]["n"] == 6 and rep["controls"]["sft"]["true_acc"] == doc["true_acc"]
    md = (out / "report.md").read_text()
    assert "| sft (control) |" in md and "last round - sft control" in md
    assert "control_gain" not in rep and "Positive control" not in md  # no gold arm yet
    gold = loop.gold_control()  # the positive control's gain over the SFT prover, paired on the same proofs
    rep = write_report(out, 2, 20, 0)
    assert rep["control_gain"]["n"] == 6, rep.get("control_gain")
    assert abs(rep["control_gain"]["delta"] - (gold["true_acc"] - doc["true_acc"])) < 1e-9
    assert "Positive control, gold - SFT prover:" in (out / "report.md").read_text()


# ------------------------------------------------------------------ (iii) killed half-way, resumed
SCRIPT = """
import json, os, sys
from training.loop import LoopConfig, run
from verifier.config import EndpointConfig
from verifier.results import WandbConfig
kw = json.loads(os.environ["LOOP_KW"])
ep = EndpointConfig(base_url=os.environ["LOOP_URL"], api_key=os.environ["LOOP_KEY"], model=os.environ["LOOP_MODEL"],
                    max_concurrency=8, timeout_s=60, max_retries=1)
run(LoopConfig(wandb=WandbConfig(enabled=False), **kw), serve=lambda name, model: ep)
"""


def test_killed_half_way_resumes_without_redoing_stages(two_rounds, tiny_model, stand_in, tmp_path):
    shared, _ = two_rounds
    out = tmp_path / "resumed"
    # round 0 shared with the 2-round loop (round 0 does not depend on the annotator); round 1 labels without an expert
    kw = {**TINY, "out": str(out), "base_model": str(tiny_model), "rounds": 1, "share_round0": str(shared),
          "annotator": "autolabel", "autolabel_n": 2, "autolabel_m": 1, "autolabel_k": 1}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "LOOP_KW": json.dumps(kw),
           "LOOP_URL": stand_in, "LOOP_KEY": "k", "LOOP_MODEL": MODEL}
    p = subprocess.Popen([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    marker = out / "round_1" / "selection" / "loop_done.json"
    deadline = time.monotonic() + 300
    while not marker.is_file():
        assert p.poll() is None and time.monotonic() < deadline, "the loop ended before its selection stage"
        time.sleep(0.2)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert not (out / "round_1" / "heldout.json").exists()
    assert (out / "round_0").is_symlink()  # round 0 shared with the 2-round loop (same round-0 settings)
    # the kill lands at or after selection; a fast stage (autolabel, augment) may have finished before it did
    stages = ("proofs", "selection", "annotate", "augment", "verifier", "check", "prover", "heldout")
    done = {s: (out / "round_1" / s / "loop_done.json").stat().st_mtime_ns for s in stages
            if (out / "round_1" / s / "loop_done.json").is_file()}
    assert {"proofs", "selection"} <= set(done) and "heldout" not in done, done
    r = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for s in ("prover_sft", "verifier", "prover", "heldout"):
        assert f"round 0 {s}: resumed" in r.stdout, r.stdout[-2000:]
    for s in stages:
        assert f"round 1 {s}: {'resumed' if s in done else 'done'}" in r.stdout, (s, r.stdout[-2000:])
    assert {s: (out / "round_1" / s / "loop_done.json").stat().st_mtime_ns for s in done} == done  # not redone
    assert (out / "round_1" / "heldout.json").is_file() and (out / "report.md").is_file()
    ann = json.loads((out / "round_1" / "annotate" / "result.json").read_text())
    assert ann["summary"]["trajectories"] == 2 and ann["labelled"] + ann["undecided"] == 2, ann  # autolabel: each queued
    # other options are one error naming them, before any work, never a silent mix
    other = _cfg(out, tiny_model, rounds=1, share_round0=str(shared), annotator="autolabel", autolabel_n=2,
                 autolabel_m=1, autolabel_k=1, budget=3)
    with pytest.raises(InputError, match=r"round_1/\w+: finished with other settings \(budget differ\)"):
        run_loop(other, serve=_serve(stand_in))


def test_prover_from_sft_and_annotation_weight(two_rounds, tiny_model, stand_in, tmp_path):
    """``prover_from=sft``: round 1's prover GRPO starts from round 0's SFT prover, not round 0's GRPO prover;
    ``annotation_weight=3``: each annotated proof is in the verifier's retraining data three times. At their
    defaults the two options are not in a stage's recorded settings (folders of earlier loops resume)."""
    shared, _ = two_rounds
    out = tmp_path / "from_sft"
    run_loop(_cfg(out, tiny_model, rounds=1, share_round0=str(shared), prover_from="sft", annotation_weight=3),
             serve=_serve(stand_in))
    init = json.loads((out / "round_1" / "prover" / "config.json").read_text())["init_from"]
    assert Path(init).resolve() == (shared / "round_0" / "prover_sft" / "sft" / "final").resolve(), init
    default = json.loads((shared / "round_1" / "prover" / "config.json").read_text())["init_from"]
    assert Path(default).resolve() == (shared / "round_0" / "prover" / "final").resolve(), default
    v = json.loads((out / "round_1" / "verifier" / "result.json").read_text())
    rows = [json.loads(x) for x in (out / "round_1" / "verifier" / "data" / v["variant"] / "weighted.jsonl").open()]
    copies = [r["id"] for r in rows if "#w" in r["id"]]
    assert v["extra"] >= 1 and len(copies) == 2 * v["extra"] and v["data"]["rows"] == len(rows), (v, copies)
    assert v["data"]["annotation_weight"] == 3
    marker = json.loads((shared / "round_1" / "proofs" / "loop_done.json").read_text())
    assert "prover_from" not in marker and "annotation_weight" not in marker
    assert json.loads((out / "round_1" / "proofs" / "loop_done.json").read_text())["prover_from"] == "sft"
    assert gold_steps(LoopConfig(out="x", rounds=2, grpo_steps=24)) == 72
    assert gold_steps(LoopConfig(out="x", rounds=2, grpo_steps=24, prover_from="sft")) == 24
    with pytest.raises(InputError, match="field 'prover_from'"):
        check_config(LoopConfig(out=str(out), prover_from="gold"))


def test_the_sft_prover_is_a_checkpoint_or_a_given_folder(tiny_model, tmp_path):
    """``prover_sft_checkpoint=N``: round 0's SFT prover is checkpoint N of the SFT schedule, not its final weights;
    ``prover_sft_from=DIR``: that folder, and no SFT runs. Bad values are one error naming the field."""
    from training.loop import Loop

    loop = Loop(_cfg(tmp_path / "ckpt", tiny_model, prover_sft_steps=2, prover_sft_checkpoint=1))
    p = loop.prover_sft(tmp_path / "ckpt" / "sft_stage")
    assert Path(p["prover"]).name == "checkpoint-1" and (Path(p["prover"]) / "config.json").is_file(), p
    assert (Path(p["prover"]).parent / "final" / "config.json").is_file()  # the schedule still runs to its end
    given = Loop(_cfg(tmp_path / "given", tiny_model, prover_sft_from=p["prover"]))
    q = given.prover_sft(tmp_path / "given" / "sft_stage")
    assert q["prover"] == str(Path(p["prover"]).resolve()) and q["rows"] == 0, q
    assert not (tmp_path / "given" / "sft_stage" / "sft").exists()
    assert "prover_sft_from" not in Loop(_cfg(tmp_path / "x", tiny_model)).round0_settings  # at its default
    assert given.round0_settings["prover_sft_from"] == p["prover"]
    for bad, what in (({"prover_sft_checkpoint": 3}, "field 'prover_sft_checkpoint'"),
                      ({"prover_sft_from": str(tmp_path / "none")}, "field 'prover_sft_from'"),
                      ({"prover_sft_from": p["prover"], "prover_sft_checkpoint": 1}, "'prover_sft_from' and")):
        with pytest.raises(InputError, match=what):
            check_config(_cfg(tmp_path / "bad", tiny_model, **bad))


# ------------------------------------------------------------------ (iv) the bench's last line
def test_bench_last_line_has_the_contract_keys_in_order(capsys):
    from bench.bench_loop import LAST_LINE_KEYS, line_values
    from bench.common import last_line

    expert = {"rounds": [{"true_acc": 0.1, "hacking_rate": 0.3}, {"true_acc": 0.2}, {"true_acc": 0.25,
                                                                                    "hacking_rate": 0.1,
                                                                                    "exploit_rate": 0.05}],
              "true_gain": {"delta": 0.15, "ci": [0.02, 0.3]}}
    auto = {"rounds": [{"true_acc": 0.1}, {"true_acc": 0.12}, {"true_acc": 0.11}]}
    line = last_line(*line_values(expert, auto, {"true_acc": 0.4}, rounds=2))
    assert capsys.readouterr().out.strip().splitlines()[-1] == line
    assert [kv.split("=")[0] for kv in line.split()] == list(LAST_LINE_KEYS)
    assert line == ("rounds=2 true_acc_r0=0.1000 true_acc_final=0.2500 true_gain_ci_low=0.0200 gold_true_acc=0.4000 "
                    "hacking_r0=0.3000 hacking_final=0.1000 exploit_rate_final=0.0500 autolabel_true_acc_final=0.1100")
    # a refused autolabel arm (a verifier never taught to meta-verify): nan, and its reason in the report
    from bench.bench_loop import BenchConfig, markdown

    refused = {"refused": "autolabel: the meta-verifier 'verifier' gave no grade", "rounds": [{}], "true_gain": {}}
    line = last_line(*line_values(expert, refused, {"true_acc": 0.4}, rounds=2))
    assert line.endswith("exploit_rate_final=0.0500 autolabel_true_acc_final=nan")
    md = markdown(BenchConfig(), {"expert": expert | {"true_gain": {"delta": 0.15, "ci": [0.02, 0.3]}},
                                  "autolabel": refused}, {"true_acc": 0.4, "n": 3}, 60.0)
    assert "| autolabel | refused: autolabel: the meta-verifier 'verifier' gave no grade |" in md
    assert "| gold (exact reward) | | 40.0 |  | |" in md  # no SFT control: no positive-control gain
    md = markdown(BenchConfig(), {"expert": expert | {"control_gain": {"delta": 0.05, "ci": [0.01, 0.09]}},
                                  "autolabel": refused}, {"true_acc": 0.4, "n": 3}, 60.0)
    assert "| gold (exact reward) | | 40.0 | gold - SFT: 5.0 [1.0, 9.0] |" in md


def test_bench_arms_share_round0_and_pass_the_round_options():
    """bench-loop's arms: the autolabel arm reuses the expert arm's round 0; ``round0_from`` gives the expert arm
    another bench folder's round 0; the loop's round options reach both arms."""
    from bench.bench_loop import BenchConfig, loop_config, parse_options

    cfg = parse_options(["out=runs/b", "round0_from=runs/a", "prover_from=sft", "annotation_weight=2", "budget=96"])
    e, a = loop_config(cfg, "expert"), loop_config(cfg, "autolabel")
    assert (e.share_round0, a.share_round0) == ("runs/a/expert", "runs/b/expert")
    assert {(c.prover_from, c.annotation_weight, c.budget) for c in (e, a)} == {("sft", 2, 96)}
    assert loop_config(BenchConfig(), "expert").share_round0 is None


# ------------------------------------------------------------------ the user's command, with real vLLM servers
@pytest.mark.slow
def test_the_loop_command_runs_a_round_through_real_vllm_servers(tmp_path):
    """``python -m training.loop`` as a user types it: every model served by vLLM (``verifier.serve``; no stand-in),
    round 0 and one round with the simulated expert, each round's held-out file, the report."""
    out = tmp_path / "loop"
    args = [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in TINY.items() if k != "progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "training.loop", f"out={out}", "rounds=1", "wandb.enabled=false", *args],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    for rnd in (0, 1):
        doc = json.loads((out / f"round_{rnd}" / "heldout.json").read_text())
        assert doc["round"] == rnd and doc["n"] == 6 and set(HELDOUT_KEYS) <= set(doc)  # 3 problems x eval_proofs=2
    ann = json.loads((out / "round_1" / "annotate" / "result.json").read_text())  # 2 SFT steps: junk proofs,
    assert "labelled" in ann and (ann["labelled"] or ann.get("note"))  # an empty queue is said, not silent
    for name in ("prover", "verifier"):  # the served models were real vLLM servers
        assert "vLLM" in (out / f"vllm-{name}.log").read_text(errors="replace") or \
            "vllm" in (out / f"vllm-{name}.log").read_text(errors="replace")
    assert "true accuracy gain over round 0" in r.stdout and (out / "report.md").is_file()
