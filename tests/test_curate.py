"""Problem curation (section 3.1): answer-centric rules, duplicates, classifier label parsing, outputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from data_pipeline.curate import (
    CurateConfig,
    curate,
    parse_task_type,
    rule_match,
    rule_task_type,
    run,
)
from verifier.formats import ProofProblem, load_proofbench_problems
from verifier.identity import normalize_text
from verifier.io import read_jsonl, write_jsonl
from verifier.records import ParseStatus

REPO = Path(__file__).resolve().parents[1]

ANSWER_CENTRIC = [
    ("True or false: every bounded sequence of reals converges.", "true_false"),
    ("Decide (T/F) whether $\\mathbb{Q}$ is complete.", "true_false"),
    ("Which of the following groups is cyclic? (A) $S_3$ (B) $\\mathbb{Z}_6$ (C) $D_4$ (D) $Q_8$", "multiple_choice"),
    ("Let $f(x)=x^2$. Then f'(1) equals\n(A) 0\n(B) 1\n(C) 2\n(D) 4", "multiple_choice"),
    ("The dimension of the space of $3\\times 3$ symmetric matrices is ____.", "fill_in_blank"),
    ("Fill in the blank: the order of $S_4$ is \\underline{\\hspace{1cm}}.", "fill_in_blank"),
]
PROOFS = [
    "Prove that there are infinitely many primes.",
    "Let $G$ be a finite group of order $p^2$. Show that $G$ is abelian.",
    "Prove or disprove: every continuous function on $[0,1]$ is uniformly continuous.",
    "Let (a_n) be a sequence with a_{n+1} = a_n / 2. Determine all limits and prove your answer.",
]


@pytest.mark.parametrize("text,kind", ANSWER_CENTRIC)
def test_rules_flag_answer_centric(text, kind):
    assert rule_task_type(text)[0] == kind


@pytest.mark.parametrize("text", PROOFS)
def test_rules_keep_proof_problems(text):
    assert rule_task_type(text) == ("proof", "")


def test_real_proofbench_is_not_flagged(shared_data):
    """IMO-ProofBench v2 has only proof problems ("choose one of the two operations" is not an options list)."""
    problems = load_proofbench_problems(shared_data / "imo_proofbench_v2" / "proofbench_v2.csv")
    flagged = [(p.id, rule_task_type(p.problem)) for p in problems if rule_task_type(p.problem)[0] != "proof"]
    assert not flagged, flagged
    assert len(problems) == 60
    removed = [(d.id, d.reason) for d in curate(problems, CurateConfig()) if not d.kept]  # default filters
    assert removed == []
    assert rule_task_type("Choose one of the following: (A) 1 (B) 2 (C) 3")[0] == "multiple_choice"


RULE_TYPES = ("multiple_choice", "true_false", "fill_in_blank")
FORMATS = REPO / "tests" / "data" / "curate_formats.jsonl"  # labelled set; see curate_formats.SOURCE.md


def test_formats_labelled_set_precision_recall_and_each_format():
    """Answer-centric removal on 277 labelled problems in varied formats (figures in docs/data_pipeline.md)."""
    rows = read_jsonl(FORMATS)
    assert len(rows) >= 200 and {r["task_type"] for r in rows} >= {"proof", "other_answer", *RULE_TYPES}
    pred = {r["id"]: rule_match(r["problem"]) for r in rows}
    pos = [r for r in rows if r["task_type"] in RULE_TYPES]
    flagged = [r for r in rows if pred[r["id"]][0] != "proof"]
    tp = sum(r["task_type"] in RULE_TYPES for r in flagged)
    precision, recall = tp / len(flagged), tp / len(pos)
    assert precision >= 0.97 and recall >= 0.94, (precision, recall)  # measured 0.993 / 0.966
    # every format written before the measurement is caught with its type, every hard negative kept
    for r in rows:
        kind, rule, _ = pred[r["id"]]
        if r["format"].split(":")[0] in ("mc", "tf", "fib"):
            assert (kind, bool(rule)) == (r["task_type"], True), (r["id"], r["problem"][-200:], pred[r["id"]])
        elif r["format"].startswith("neg:") or r["source"] == "imo_proofbench_v2":
            assert kind == "proof", (r["id"], pred[r["id"]])
    formats = {r["format"] for r in rows}
    assert {"mc:circled", "mc:fullwidth_paren", "mc:lower_close", "mc:options_header_two", "mc:bracket_inline",
            "mc:colon_lines", "mc:dot_inline", "tf:tf_marker", "fib:latex_underline_hspace"} <= formats


def test_rule_names_in_decisions():
    ps = [ProofProblem("c", "Compute $1+1$.\nⒶ 1 Ⓑ 2 Ⓒ 3 Ⓓ 4"), ProofProblem("h", "What is 2+2?\nOptions: a) 4 b) 5"),
          ProofProblem("t", "T/F: $2^{10}>10^3$."), ProofProblem("p", "Find all $f$ such that (a) $f(0)=1$ (b) $f(1)=2$ "
                                                                       "(c) $f(2)=3$, and prove it.")]
    dec = {d.id: d for d in curate(ps, CurateConfig(near_duplicate_threshold=None))}
    assert dec["c"].reason == "answer_centric:multiple_choice" and dec["c"].detail.startswith("rule mc_options ")
    assert dec["h"].detail.startswith("rule mc_options_after_header ")
    assert dec["t"].reason == "answer_centric:true_false" and "tf_phrase" in dec["t"].detail
    assert dec["p"].kept


def test_duplicates_exact_and_near():
    ps = [ProofProblem("a", "Prove that $\\sqrt{2}$ is irrational."),
          ProofProblem("b", "prove that  \\sqrt{2} is irrational"),  # same normalised text
          ProofProblem("c", "Prove that the number $\\sqrt{2}$ is irrational."),  # near duplicate
          ProofProblem("d", "Prove that every group of prime order is cyclic."),
          ProofProblem("e", "True or false: $\\sqrt{2}$ is irrational.")]
    assert normalize_text(ps[0].problem, fold=True) == normalize_text(ps[1].problem, fold=True)
    dec = {d.id: d for d in curate(ps, CurateConfig(near_duplicate_threshold=0.8))}
    assert dec["a"].kept and dec["d"].kept
    assert dec["b"].reason == "duplicate" and "'a'" in dec["b"].detail
    assert dec["c"].reason == "near_duplicate" and "'a'" in dec["c"].detail
    assert dec["e"].reason == "answer_centric:true_false"
    dec = {d.id: d for d in curate(ps, CurateConfig(near_duplicate_threshold=None))}
    assert dec["c"].kept  # near-duplicate removal off
    with pytest.raises(ValueError, match="near_duplicate_threshold"):
        curate(ps, CurateConfig(near_duplicate_threshold=1.5))


def test_classifier_label_parsing_statuses():
    ok = parse_task_type("It asks to pick an option.\n<final_answer>\ntask_type: Multiple choice\n</final_answer>")
    assert ok.status is ParseStatus.OK and ok.value == "multiple_choice"
    assert parse_task_type("").status is ParseStatus.EMPTY
    assert parse_task_type("task_type: proof").status is ParseStatus.NO_ANSWER_BLOCK
    assert parse_task_type("<final_answer>kind: proof</final_answer>").status is ParseStatus.MISSING_FIELD
    assert parse_task_type("<final_answer>task_type: proof\ntask_type: true_false</final_answer>").status \
        is ParseStatus.AMBIGUOUS
    assert parse_task_type("<final_answer>task_type: essay</final_answer>").status is ParseStatus.BAD_VALUE


def test_run_writes_kept_removed_card_and_cli(tmp_path):
    rows = [{"id": f"p{i}", "problem": t, "subject": "algebra"} for i, t in enumerate(PROOFS)]
    rows += [{"id": f"x{i}", "problem": t} for i, (t, _) in enumerate(ANSWER_CENTRIC)]
    rows.append({"id": "dup", "problem": PROOFS[0].upper()})
    write_jsonl(tmp_path / "in.jsonl", rows)
    s = run(CurateConfig(input=str(tmp_path / "in.jsonl"), out=str(tmp_path / "out"), progress=False))
    assert s["kept"] == len(PROOFS) and s["removed"] == len(ANSWER_CENTRIC) + 1
    assert s["removed_by_reason"] == {"answer_centric:fill_in_blank": 2, "answer_centric:multiple_choice": 2,
                                      "answer_centric:true_false": 2, "duplicate": 1}
    kept = load_proofbench_problems(tmp_path / "out" / "problems.jsonl")  # candidates reads this file
    assert [p.id for p in kept] == [f"p{i}" for i in range(len(PROOFS))] and kept[0].subject == "algebra"
    removed = read_jsonl(tmp_path / "out" / "removed.jsonl")
    assert all(r["reason"] and r["detail"] and r["problem"] for r in removed)
    assert "| duplicate | 1 |" in (tmp_path / "out" / "README.md").read_text()
    assert (tmp_path / "out" / "curation.png").stat().st_size > 1000
    r = subprocess.run([sys.executable, "-m", "data_pipeline.curate", f"input={tmp_path / 'in.jsonl'}",
                        f"out={tmp_path / 'cli'}", "progress=false", "plot=false"],
                       cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1].startswith(f"curate: kept {len(PROOFS)} of {len(rows)} problems")
    assert json.loads((tmp_path / "cli" / "curate_summary.json").read_text())["kept"] == len(PROOFS)


def test_bad_input_names_record_and_field(tmp_path):
    write_jsonl(tmp_path / "bad.jsonl", [{"id": "p1", "problem": "Prove x."}, {"id": "p2", "problem": ""}])
    with pytest.raises(Exception, match="record 'p2', field 'problem'"):
        run(CurateConfig(input=str(tmp_path / "bad.jsonl"), out=str(tmp_path / "o")))
