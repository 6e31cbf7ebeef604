"""Synthetic task: exact annotations (checked by an independent re-computation), knobs, determinism, CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from data_pipeline.synthetic import SyntheticConfig, generate_synthetic, gold_verification, sft_row
from verifier.io import load_trajectories, write_jsonl
from verifier.meta_verifier import RuleMetaVerifier, mentioned_steps
from verifier.parser import parse_verification
from verifier.records import MetaGrade

REPO = Path(__file__).resolve().parents[1]
_OP = re.compile(r"^(\d+)x? ([+*-]) (\d+)x? (=|==|->) (\d+)x?$")
_FINAL = re.compile(r"^So the (?:answer is|expression equals) (\d+)x?\.$")


def independent_annotation(steps: tuple[str, ...]) -> tuple[int, list[int]]:
    """Recompute (first fatal step, recoverable steps) from the text alone."""
    prev, fatal, slips = None, -1, []
    for i, s in enumerate(steps):
        m = _OP.match(s)
        if m:
            a, op, b, eq, r = int(m[1]), m[2], int(m[3]), m[4], int(m[5])
            true = a + b if op == "+" else a - b if op == "-" else a * b
            if (prev is not None and a != prev) or true != r:
                return i, slips
            if eq != "=":
                slips.append(i)
            prev = r
        else:
            m = _FINAL.match(s)
            assert m, f"unexpected step text {s!r}"
            assert i == len(steps) - 1
            if int(m[1]) != prev:
                return i, slips
    return fatal, slips


def test_annotations_are_exact_and_formats_hold():
    trajs = generate_synthetic(600, seed=3, error_delta_min=1, error_delta_max=3, ops="+-*")
    kinds = set()
    for t in trajs:
        fatal, slips = independent_annotation(t.proof_steps)
        assert t.annotation.first_fatal_error_step == fatal, t.to_dict()
        assert list(t.annotation.recoverable_error_steps) == slips, t.to_dict()
        assert 3 <= len(t.proof_steps) <= 7
        assert t.subject in ("arithmetic", "algebra") and t.split in ("UG", "QE")
        assert t.source == "synthetic" and t.problem_id and t.id.startswith(t.problem_id)
        kinds.add(t.meta["synthetic"]["fatal_kind"])
        if not t.annotation.is_valid:
            # the reviewer comment names the fatal step; every recoverable step is named too
            assert f"Step {fatal} is wrong" in t.annotation.reviewer_comment
            assert t.annotation.correction
        assert set(t.annotation.recoverable_error_steps) <= mentioned_steps(t.annotation.reviewer_comment)
    assert kinds == {None, "wrong_result", "wrong_operand", "wrong_final"}
    valid = sum(t.annotation.is_valid for t in trajs) / len(trajs)
    assert 0.4 < valid < 0.6
    assert any(t.annotation.recoverable_error_steps and not t.annotation.is_valid for t in trajs)
    assert any(t.annotation.recoverable_error_steps and t.annotation.is_valid for t in trajs)


def test_knobs_and_determinism():
    a = generate_synthetic(50, seed=11)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in generate_synthetic(50, seed=11)]
    assert [t.to_dict() for t in a] != [t.to_dict() for t in generate_synthetic(50, seed=12)]
    easy = generate_synthetic(200, seed=0, min_steps=3, max_steps=3, max_operand=9, qe_fraction=0.0,
                              valid_fraction=1.0, recoverable_rate=0.0, subjects=["arithmetic"], ops="+")
    assert all(len(t.proof_steps) == 3 and t.annotation.fully_correct for t in easy)
    assert all(max(int(x) for x in re.findall(r"\d+", t.problem)) <= 9 for t in easy)
    bad = generate_synthetic(200, seed=0, valid_fraction=0.0, fatal_kinds=["wrong_result"], error_delta_min=20,
                             error_delta_max=20, recoverable_rate=0.0)
    for t in bad:
        p = t.meta["synthetic"]["planted"]
        assert abs(p["written"] - p["expected"]) == 20
    assert len({t.problem_id for t in generate_synthetic(9, proofs_per_problem=3)}) == 3
    with pytest.raises(ValueError, match="fatal_kinds"):
        SyntheticConfig(fatal_kinds=["typo"]).validate()
    with pytest.raises(ValueError, match="min_steps"):
        SyntheticConfig(min_steps=5, max_steps=4).validate()


def test_gold_verification_parses_and_grades_exact():
    meta = RuleMetaVerifier()
    for style in ("stepwise", "check", "copy_check", "short"):
        for t in generate_synthetic(200, seed=5):
            text = gold_verification(t, style)
            out = parse_verification(text, len(t.proof_steps))
            assert out.ok and out.verdict is t.gold_verdict
            assert out.first_error_step == t.annotation.first_fatal_error_step
            assert meta.grade(t, out).grade is MetaGrade.EXACT_MATCH, (style, t.id, text)
    # style=check: step 0 copied, then one copy-and-compare line per step up to the fatal one; an ok
    # operation step is copied after its check, so its result sits next to the following check
    t = next(t for t in generate_synthetic(50, seed=3, fatal_kinds=["wrong_operand"], recoverable_rate=0.0,
                                           subjects=["arithmetic"])
             if not t.annotation.is_valid and t.annotation.first_fatal_error_step >= 2)
    k = t.annotation.first_fatal_error_step
    written, expected = t.meta["synthetic"]["planted"]["written"], t.meta["synthetic"]["planted"]["expected"]
    lines = gold_verification(t, "check").split("\n\n")[0].splitlines()
    assert lines[0] == f"Step 0: {t.proof_steps[0]}" and len(lines) == k + 1
    assert lines[-1] == f"Step {k}: {written} vs {expected}, fatal"
    for i in range(1, k):
        start = t.proof_steps[i].split(" ")[0]
        prev = t.proof_steps[i - 1].split(" ")[-1]
        assert lines[i] == f"Step {i}: {start} vs {prev}, ok: {t.proof_steps[i]}"
    # style=copy_check: each step copied first, then its start compared with the previous result
    clines = gold_verification(t, "copy_check").split("\n\n")[0].splitlines()
    assert clines[0] == lines[0] and len(clines) == k + 1
    assert clines[-1] == f"Step {k}: {t.proof_steps[k]} | {written} vs {expected}, fatal"
    for i in range(1, k):
        start, prev = t.proof_steps[i].split(" ")[0], t.proof_steps[i - 1].split(" ")[-1]
        assert clines[i] == f"Step {i}: {t.proof_steps[i]} | {start} vs {prev}, ok"
    valid = next(t for t in generate_synthetic(20, seed=3, recoverable_rate=0.0, subjects=["arithmetic"])
                 if t.annotation.is_valid)
    vlines = gold_verification(valid, "check").split("\n\n")[0].splitlines()
    answer = valid.proof_steps[-1].rstrip(".").split(" ")[-1]
    assert vlines[-2] == f"Step {len(valid.proof_steps) - 1}: {answer} vs {answer}, ok"
    assert vlines[-1] == "All steps are correct."
    row = sft_row(generate_synthetic(1, seed=2)[0])
    assert row["prompt"][0]["role"] == "user" and row["completion"][0]["role"] == "assistant"



def test_exclude_problems_of_gives_fresh_problems_only(tmp_path):
    """The demo's candidates exclude the annotated set's problems: a small problem space (3-step one-digit
    chains) would otherwise repeat held-out problems among the selected candidates."""
    knobs = dict(min_steps=3, max_steps=3, max_operand=3, recoverable_rate=0.0, qe_fraction=0.0,
                 subjects=["arithmetic"], problem_id_from_text=True)
    base = generate_synthetic(200, seed=0, **knobs)
    write_jsonl(tmp_path / "base.jsonl", base)
    texts = {t.problem for t in base}
    assert any(t.problem in texts for t in generate_synthetic(40, seed=1, **knobs))  # without: repeats
    fresh = generate_synthetic(40, seed=1, exclude_problems_of=str(tmp_path / "base.jsonl"), **knobs)
    assert len(fresh) == 40 and not any(t.problem in texts for t in fresh)
    with pytest.raises(ValueError, match="exclude_problems_of"):  # the knobs leave too few problems
        generate_synthetic(400, seed=1, exclude_problems_of=str(tmp_path / "base.jsonl"),
                           **{**knobs, "max_operand": 1})

def test_cli_writes_loadable_jsonl(tmp_path):
    out = tmp_path / "syn"
    r = subprocess.run([sys.executable, "-m", "data_pipeline.synthetic", f"out={out}", "n=30", "seed=4",
                        "max_operand=20", "progress=false"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "wrote 30 trajectories" in r.stdout
    loaded = load_trajectories(out / "synthetic.jsonl")
    assert len(loaded.records) == 30 and not loaded.errors
    assert [t.to_dict() for t in loaded.records] == [t.to_dict() for t in generate_synthetic(30, seed=4, max_operand=20)]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n"] == 30 and sum(summary["polarity"].values()) == 30
    assert len((out / "sft.jsonl").read_text().splitlines()) == 30


def test_fits_tiny_model_context(tiny_model):
    """Prompt + gold answer stay short in the tiny model's tokenizer (CPU-scale training)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    lengths = []
    for t in generate_synthetic(50, seed=0):
        row = sft_row(t)
        ids = tok.apply_chat_template(row["prompt"] + row["completion"], tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        lengths.append(len(ids))
    assert max(lengths) < 1024, max(lengths)


def test_problem_id_from_text_groups_repeated_problems():
    """A small problem space repeats problem texts; with problem_id_from_text the same text is the same problem,
    so a split by problem never puts a training problem into the held-out set."""
    kw = {"min_steps": 3, "max_steps": 3, "max_operand": 3, "recoverable_rate": 0.0, "subjects": ["arithmetic"]}
    by_index = generate_synthetic(400, seed=0, **kw)
    by_text = generate_synthetic(400, seed=0, problem_id_from_text=True, **kw)
    assert [t.problem for t in by_text] == [t.problem for t in by_index]  # same proofs, other problem ids
    assert len({t.id for t in by_text}) == 400
    texts = {t.problem for t in by_text}
    assert len({t.problem_id for t in by_index}) == 200 > len(texts) == len({t.problem_id for t in by_text})
    other_seed = generate_synthetic(100, seed=1, problem_id_from_text=True, **kw)
    pid = {t.problem: t.problem_id for t in by_text}
    assert all(pid[t.problem] == t.problem_id for t in other_seed if t.problem in pid)
