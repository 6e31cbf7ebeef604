"""The expert-free labeller (data_pipeline.autolabel): the rule on hand-made analyses, the measurement against
exact truth on hand-made cases, the reference-free meta-verification prompt, and the command end to end on
fake verifier and meta-verifier engines (no server): labels equal to the exact checker's truth, the undecided
proofs apart with their reasons, every count, a resumed run that grades only the missing meta grades; errors
name the key."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from data_pipeline import autolabel
from data_pipeline.autolabel import Analysis, AutolabelConfig, label_proof, measure, synthetic_truth
from data_pipeline.synthetic import generate_synthetic
from verifier import meta_verifier
from verifier.config import Sampling, compose
from verifier.engine import Completion, GenerationRequest, base_seed
from verifier.errors import EXIT_USER_ERROR, InputError
from verifier.io import read_jsonl, write_jsonl
from verifier.parser import format_meta_verification, format_verification
from verifier.records import MetaGrade, ParseStatus, ProofTrajectory, Verdict, VerificationOutput
from verifier.templates import meta_verification_prompt

REPO = Path(__file__).resolve().parents[1]
E, B, P, W = MetaGrade.EXACT_MATCH, MetaGrade.BASIC_MATCH, MetaGrade.POOR_MATCH, MetaGrade.WRONG_POLARITY
V, X = Verdict.VALID, Verdict.INVALID


def ok(i: int) -> Analysis:
    return Analysis(i, V, rationale=f"analysis {i}: every step holds")


def bad(i: int, step: int, *grades: MetaGrade | None) -> Analysis:
    return Analysis(i, X, step, f"analysis {i}: step {step} is wrong", tuple(grades))


# --- resume reads its judgments file through the one judgment record -----------------------------------------

def test_resume_refuses_another_n_or_meta_verifier(tmp_path):
    """``check_resume`` reads ``judgments.jsonl`` with ``Judgment.from_row``: a row of another n or another
    meta-verifier stops the run, naming the record and the key."""
    cfg = AutolabelConfig(n=2)
    path = tmp_path / "judgments.jsonl"
    passes = [{"index": i, "verdict": "valid", "text": "ok"} for i in range(2)]
    write_jsonl(path, [{"id": "t0", "verdict": "valid", "n": 2, "passes": passes,
                        "meta_verifier": autolabel.meta_name(cfg)}])
    autolabel.check_resume(path, cfg)  # the same n and meta-verifier: resumed
    with pytest.raises(InputError, match=r"field 'n': .* record 't0' judged with n=2, not n=4"):
        autolabel.check_resume(path, AutolabelConfig(n=4))
    write_jsonl(path, [{"id": "t1", "verdict": "valid", "n": 2, "passes": passes, "meta_verifier": "rule"}])
    with pytest.raises(InputError, match=r"field 'meta': .* record 't1' graded by 'rule'"):
        autolabel.check_resume(path, cfg)


# --- the rule (pure) --------------------------------------------------------------------------------------------

def test_k_not_reached_is_undecided():
    lab = label_proof([ok(0), bad(1, 2, E, E, E), bad(2, 1, W, W, P), Analysis(3, None)], k=3)
    assert (lab.decision, lab.reason, lab.valid) == ("undecided", "too_few_valid", (0, 1))
    assert label_proof([Analysis(0, None), Analysis(1, None)], k=1).reason == "too_few_valid"  # unparseable: none


def test_lowest_score_among_valid_analyses_wins():
    lab = label_proof([ok(0), ok(1), bad(2, 3, E, B, W), ok(3)], k=4)
    assert (lab.decision, lab.first_error_step, lab.analysis, lab.valid) == ("invalid", 3, 2, (0, 1, 2, 3))
    assert lab.reviewer_comment == "analysis 2: step 3 is wrong"
    # several valid rejections: the step by judge.step_rule, the comment of the first analysis naming it
    many = [bad(0, 4, E, E, E), bad(1, 2, B, B, P), bad(2, 4, E, E, E), ok(3)]
    assert (label_proof(many, k=2).first_error_step, label_proof(many, k=2).analysis) == (2, 1)
    assert (label_proof(many, k=2, step_rule="most_named").first_error_step,
            label_proof(many, k=2, step_rule="most_named").analysis) == (4, 0)
    # min_grade raises the bar: BASIC grades no longer confirm analysis 1
    assert label_proof(many, k=2, min_grade=E).first_error_step == 4


def test_an_invalid_analysis_is_ignored():
    refuted = [ok(0), ok(1), ok(2), bad(3, 0, W, W, E)]  # one lenient grade, the majority refutes it
    lab = label_proof(refuted, k=3)
    assert (lab.decision, lab.valid, lab.first_error_step) == ("valid", (0, 1, 2), -1)
    assert label_proof(refuted, k=4).reason == "too_few_valid"  # ignored, so it does not count towards k
    # DeepSeekMath-V2's reading: the lowest-scoring analyses (the rejection) must hold k valid ones
    assert label_proof(refuted, k=1, k_of="lowest_score").reason == "too_few_valid"
    assert label_proof([ok(0), bad(1, 2, E, E, P), bad(2, 2, E, B, W)], k=2, k_of="lowest_score").decision == "invalid"
    assert label_proof([ok(0), bad(1, 2, E, None, P)], k=1).reason == "meta_failed"  # a missing grade: re-run


def test_all_valid_analyses_accept_is_valid():
    lab = label_proof([ok(0), ok(1), ok(2), Analysis(3, None)], k=3)
    assert (lab.decision, lab.analysis, lab.reviewer_comment) == ("valid", 0, "analysis 0: every step holds")
    assert label_proof([ok(0), ok(1)], k=2, k_of="lowest_score").decision == "valid"


# --- measured against truth (hand-made) ---------------------------------------------------------------------------

def test_measure_on_hand_made_labels():
    labels = {"a": ("invalid", 2), "b": ("invalid", 1), "c": ("invalid", 0), "d": ("valid", -1),
              "e": ("valid", -1), "f": ("undecided", -1), "i": ("valid", -1)}
    truth = {"a": (False, 2), "b": (False, 3), "c": (True, -1), "d": (False, 1), "e": (True, -1),
             "f": (False, 0), "g": (False, 4), "h": None, "i": (False, 0)}
    m = measure(labels, truth)
    assert (m["proofs"], m["no_truth"], m["labelled"], m["undecided"]) == (8, 1, 6, 2)  # g: no label = undecided
    assert m["confusion"] == {"tp": 2, "fp": 1, "fn": 2, "tn": 1}
    assert m["coverage"] == 6 / 8 and m["precision_invalid"] == 2 / 3 and m["recall_invalid"] == 2 / 4
    assert m["recall_invalid_all"] == 2 / 6 and m["accuracy"] == 3 / 6
    assert (m["exact_first_step"], m["exact_first_step_of"]) == (1 / 2, 2)  # a exact, b off by two
    empty = measure({}, {"x": None})
    assert empty["coverage"] is None and empty["precision_invalid"] is None and empty["exact_first_step"] is None


def test_reference_free_meta_prompt():
    t = ProofTrajectory("t", "p", "Compute 5 + 3.", ("5 + 3 = 9", "So the answer is 9."))
    out = VerificationOutput(ParseStatus.OK, X, 0, "Step 0 adds wrongly: 5 + 3 = 8.")
    text = meta_verification_prompt(t, out, template="meta_verify_analysis")
    assert "First error step named by the model: 0" in text and "5 + 3 = 8." in text and "Expert" not in text
    with pytest.raises(InputError, match="needs an expert annotation"):
        meta_verification_prompt(t, out)  # B.3 grades against the expert: refused without an annotation


# --- the command end to end (fake engines) ------------------------------------------------------------------------

class FakeVerifier:
    """Per proof (request key = id) and pass (seed - the proof's base seed), the passes in ``wrong[id]`` write a
    wrong analysis (a valid proof rejected at step 0; an invalid proof accepted, or rejected one step late), the
    others the truth."""

    def __init__(self, truth: dict[str, tuple[bool, int]], wrong: dict[str, set[int]]):
        self.truth, self.wrong, self.requests, self.model = truth, wrong, 0, "fake-verifier"

    def _one(self, key: str, seed: int) -> Completion:
        valid, step = self.truth[key]
        if seed - base_seed(key, 0) in self.wrong[key]:
            valid, step = (False, 0) if valid else (seed % 2 == 0, step + 1)
        return Completion(format_verification("valid" if valid else "invalid", -1 if valid else step,
                                              f"pass with seed {seed}: " + ("all steps hold" if valid else
                                                                            f"step {step} is wrong")), "stop")

    async def agenerate(self, requests: list[GenerationRequest], sampling: Sampling):
        self.requests += len(requests)
        return [[self._one(r.key, (r.seed or 0) + i) for i in range(r.n)] for r in requests]


class FakeMeta:
    """An exact meta-verifier with one lenient sample: grade 0 of each analysis always says EXACT_MATCH, grades 1
    and 2 compare the analysis with the truth (so the majority decides); keys in ``fail`` fail."""

    def __init__(self, truth: dict[str, tuple[bool, int]], fail: set[str] = frozenset()):
        self.truth, self.fail, self.keys = truth, set(fail), []

    def _one(self, r: GenerationRequest) -> Completion:
        rid, _, sample = r.key.rpartition("/m")
        self.keys.append(r.key)
        if r.key in self.fail:
            return Completion(status="request_failed", error="connection refused")
        valid, step = self.truth[rid.rpartition("/a")[0]]
        named = int(re.search(r"First error step named by the model: (-?\d+)", r.messages[-1]["content"]).group(1))
        grade = E if sample == "0" or (not valid and named == step) else W if valid else P
        return Completion(format_meta_verification(grade, "checked against the proof"), "stop")

    async def agenerate(self, requests, sampling):
        return [[self._one(r)] for r in requests]


@pytest.fixture()
def setup(tmp_path, monkeypatch):
    trajs = generate_synthetic(24, seed=5, valid_fraction=0.4, proofs_per_problem=2, min_steps=3, max_steps=4)
    write_jsonl(tmp_path / "proofs.jsonl", [{k: v for k, v in t.to_dict().items() if k != "annotation"}
                                            for t in trajs])  # prover proofs: no expert annotation
    truth = {t.id: synthetic_truth(t) for t in trajs}
    wrong = {t.id: {2, 3} if i % 3 == 2 else {3} for i, t in enumerate(trajs)}  # every third proof: 2 wrong passes
    verifier, meta = FakeVerifier(truth, wrong), FakeMeta(truth)
    monkeypatch.setattr(autolabel, "OpenAIEngine", lambda ep: verifier)
    monkeypatch.setattr(meta_verifier, "OpenAIEngine", lambda ep: meta)
    cfg = compose("autolabel", AutolabelConfig, [f"trajectories={tmp_path / 'proofs.jsonl'}", f"out={tmp_path / 'al'}",
                                                 "n=4", "m=3", "k=3", "truth=synthetic", "progress=false"])
    return cfg, trajs, truth, wrong, verifier, meta


def test_command_end_to_end_and_resume(setup):
    cfg, trajs, truth, wrong, verifier, meta = setup
    first = [t.id for t in trajs if truth[t.id][0] and len(wrong[t.id]) == 1][:2]
    assert len(first) == 2
    meta.fail = {f"{i}/a3/m1" for i in first}  # a failed meta-verification: those proofs wait for a re-run
    s = autolabel.run(cfg)
    out = Path(cfg.out)
    lab, und = read_jsonl(out / "labelled.jsonl"), read_jsonl(out / "undecided.jsonl")
    assert s["labelled"] == len(lab) and s["undecided"] == len(und) and len(lab) + len(und) == len(trajs) == 24
    assert s["valid"] + s["invalid"] == len(lab) and s["invalid"] > 0 and s["valid"] > 0
    # one wrong pass: 3 valid analyses = k, labelled; two: a valid proof keeps 2 (undecided), an invalid one 2 or 3
    reasons = {r["id"]: r["meta"]["autolabel"]["reason"] for r in und}
    assert {reasons[i] for i in first} == {"meta_failed"} and s["undecided_by_reason"]["meta_failed"] == 2
    too_few = {i for i, r in reasons.items() if r == "too_few_valid"}
    assert too_few and s["undecided_by_reason"]["too_few_valid"] == len(too_few)
    assert all(len(wrong[i]) == 2 for i in too_few) and set(reasons) == too_few | set(first)
    assert s["runner"]["post_failed"] == 2 and s["meta_grades"]["null"] == 2
    for r in lab:  # what every later command reads, provenance in meta.autolabel
        t = ProofTrajectory.from_dict(r)
        prov = r["meta"]["autolabel"]
        assert (t.annotation.is_valid, t.annotation.first_fatal_error_step) == truth[t.id]
        assert t.annotation.reviewer_comment.endswith("all steps hold" if truth[t.id][0] else
                                                      f"step {truth[t.id][1]} is wrong")
        assert (prov["labelled_by"], prov["n"], prov["m"], prov["k"]) == ("autolabel", 4, 3, 3)
        assert prov["valid_analyses"] == [a["index"] for a in prov["analyses"] if a["valid"]]
        assert all(len(a["grades"]) == (3 if a["verdict"] == "invalid" else 0) for a in prov["analyses"])
        assert "synthetic" in r["meta"]  # the record's own meta is kept
    m = s["measure"]
    assert m["precision_invalid"] == 1.0 and m["exact_first_step"] == 1.0 and m["accuracy"] == 1.0
    assert m["coverage"] == len(lab) / 24 and m["proofs"] == 24
    a = s["analyses"]
    assert a["analyses"] == 96 and a["accepting"] + a["reporting_issue"] + a["unparseable"] == 96
    assert a["confirmed"] + a["refuted"] + a["meta_failed"] == a["reporting_issue"] and a["meta_failed"] == 2
    assert sum(s["meta_grades"].values()) == 3 * a["reporting_issue"]
    assert json.loads((out / "autolabel_summary.json").read_text())["labelled"] == len(lab)
    # resumed: no verifier pass again, only the two missing grades, and the two proofs labelled now
    requests, meta.fail, meta.keys = verifier.requests, set(), []
    s2 = autolabel.run(cfg)
    assert verifier.requests == requests and sorted(meta.keys) == sorted(f"{i}/a3/m1" for i in first)
    assert s2["runner"]["already_done"] == 22 and s2["runner"]["post_redone"] == 2
    assert s2["undecided_by_reason"]["meta_failed"] == 0 and s2["labelled"] == s["labelled"] + 2


def test_errors_name_the_key(setup, tmp_path):
    cfg, trajs, *_ = setup
    annotated = tmp_path / "annotated.jsonl"
    write_jsonl(annotated, [trajs[0].to_dict(), {k: v for k, v in trajs[1].to_dict().items() if k != "annotation"}])
    cfg.meta.kind, cfg.trajectories = "rule", str(annotated)
    with pytest.raises(InputError, match=f"field 'meta.kind': .*record '{trajs[1].id}'"):
        autolabel.run(cfg)  # the rule meta-verifier grades against an annotation this proof lacks
    r = subprocess.run([sys.executable, "-m", "data_pipeline.autolabel", f"trajectories={annotated}",
                        f"out={tmp_path / 'x'}", "n=4", "k=5"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == EXIT_USER_ERROR and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "data_pipeline.autolabel: error: autolabel config, field 'k': must be between 1 and n=4, got 5" in r.stderr


class MuteMeta:
    """A meta-verifier never trained for the task: its answers run out of tokens, with no grade."""

    def __init__(self):
        self.calls = 0

    async def agenerate(self, requests, sampling):
        self.calls += len(requests)
        return [[Completion("Step 0: 2 + 2 = 4, correct. Step 1", "length")] for _ in requests]


def test_a_meta_verifier_without_grades_is_refused_after_the_probe(setup, monkeypatch):
    """Labels from a meta-verifier that never grades would be "valid" by unanimous acceptance alone (what
    reports/autolabel_2026-12-07_against_truth.md measured): refused after the first meta_probe proofs."""
    cfg, trajs, *_ = setup
    verifier = autolabel.OpenAIEngine(None)
    mute = MuteMeta()
    monkeypatch.setattr(meta_verifier, "OpenAIEngine", lambda ep: mute)
    cfg.meta_probe = 6
    with pytest.raises(InputError, match=r"meta-verifier .* gave no grade for (\d+) of \1 meta-verifications of the "
                                         r"first 6 proofs \(truncated \1\).*meta.template=meta_verify_analysis"):
        autolabel.run(cfg)
    assert verifier.requests == 6 and mute.calls > 0  # the probe's proofs only: one request (n passes) each
    assert len(read_jsonl(Path(cfg.out) / "judgments.jsonl")) == 6  # kept: a re-run resumes them
    cfg.meta_probe = 0  # the check off: the run goes on, and every rejecting analysis stays unconfirmed
    s = autolabel.run(cfg)
    assert s["invalid"] == 0 and s["analyses"]["confirmed"] == 0 and s["undecided_by_reason"]["meta_failed"] > 0
