"""Labels against exact truth (eval.label_quality) and `make diagnose-autolabel`'s labellings on hand-made runner
rows: every labelling from the same passes, the rates and their paired interval, the meta-check's
discrimination, the options and the last line."""

from __future__ import annotations

from verifier.errors import InputError

import subprocess
import sys
from pathlib import Path

import pytest

from bench.diagnose_autolabel import DiagnoseAutolabelConfig, labellings, meta_discrimination, parse
from eval.label_quality import measure_ci

REPO = Path(__file__).resolve().parents[1]
E, P = "EXACT_MATCH", "POOR_MATCH"


def row(pid: str, passes: list[tuple[str, int]], grades: dict[int, list[str | None]]) -> dict:
    return {"id": pid, "problem_id": pid[0], "verdict": None, "first_error_step": -1, "passes": [
        {"index": i, "verdict": v, "first_error_step": s, "parse_status": "ok", "rationale": f"pass {i}", "text": "t"}
        for i, (v, s) in enumerate(passes)],
        "analysis_meta": [[{"grade": g} for g in grades[i]] if i in grades else None for i in range(len(passes))]}


V, X = ("valid", -1), ("invalid", 2)
ROWS = {  # 4 passes each; problem = first letter
    "a1": row("a1", [V, V, V, V], {}),  # unanimous accept of a false proof
    "a2": row("a2", [X, V, V, V], {0: [E, E, P]}),  # one confirmed rejection, right step
    "b1": row("b1", [X, X, V, V], {0: [P, P, E], 1: [P, P, P]}),  # refuted rejections of a true proof
    "b2": row("b2", [("invalid", 1), V, V, V], {0: [None, None, None]}),  # meta failed
}
TRUTH = {"a1": (False, 0), "a2": (False, 2), "b1": (True, -1), "b2": (False, 2)}
PROBLEMS = {i: i[0] for i in TRUTH}


def test_labellings_from_the_same_passes():
    cfg = DiagnoseAutolabelConfig(n=4, m=3, k=2)
    labs = labellings(ROWS, cfg)
    assert labs["autolabel"] == {"a1": ("valid", -1), "a2": ("invalid", 2), "b1": ("valid", -1),
                                 "b2": ("undecided", -1)}
    assert labs["pess4"] == {"a1": ("valid", -1), "a2": ("invalid", 2), "b1": ("invalid", 2), "b2": ("invalid", 1)}
    assert labs["majority4"]["b1"] == ("invalid", 2)  # 2 of 4: no majority of accepts
    assert labs["one_pass"]["a2"] == ("invalid", 2) and labs["one_pass"]["a1"] == ("valid", -1)
    assert labs["autolabel_k4"]["a2"] == ("invalid", 2) and labs["autolabel_k4"]["b1"] == ("undecided", -1)  # 2 < 4
    assert labs["autolabel_lowest"]["b1"] == ("undecided", -1)  # the lowest score's analyses were refuted


def test_rates_with_a_paired_interval():
    labs = labellings(ROWS, DiagnoseAutolabelConfig(n=4, m=3, k=2))
    r = measure_ci({n: labs[n] for n in ("autolabel", "pess4")}, TRUTH, PROBLEMS, versus=("autolabel", "pess4"))
    a, p = r["autolabel"], r["pess4"]
    assert a["counts"] == {"proofs": 4, "labelled": 3, "tp": 1, "fp": 0, "fn": 1, "tn": 1, "truly_invalid": 3,
                           "step_known": 1, "step_exact": 1}
    assert a["coverage"]["value"] == 0.75 and a["precision_valid"]["value"] == 0.5
    assert p["precision_invalid"]["value"] == 2 / 3 and p["recall_invalid_all"]["value"] == 2 / 3
    assert p["exact_first_step"]["value"] == 0.5  # a2 at step 2 (true), b2 at step 1 (true: 2)
    lo, hi = a["coverage"]["ci"]
    assert lo <= 0.75 <= hi and r["problems"] == 2
    d = r["autolabel - pess4"]["coverage"]
    assert d["value"] == -0.25 and d["ci"][0] <= -0.25 <= d["ci"][1]


def test_meta_discrimination_by_what_the_analysis_is():
    md = meta_discrimination(ROWS, TRUTH, PROBLEMS, DiagnoseAutolabelConfig(n=4, m=3, k=2, bootstrap_n=50))
    assert md["right"] == {"analyses": 1, "confirmed": 1.0, "ci": (1.0, 1.0)}
    assert md["true_proof"]["analyses"] == 2 and md["true_proof"]["confirmed"] == 0.0
    assert md["other_step"]["analyses"] == 0  # b2's analysis has no grade: not counted


def test_options_are_one_line_errors(tmp_path):
    assert parse([f"proofs={tmp_path}", "queue=null", "base_url=http://x/v1", "n=4", "k=2"]).k == 2
    with pytest.raises(InputError, match="need 1 <= k <= n"):
        parse([f"proofs={tmp_path}", "queue=null", "base_url=http://x/v1", "n=4", "k=5"])
    with pytest.raises(InputError, match="proofs=.*nope does not exist"):
        parse([f"proofs={tmp_path / 'nope'}", "queue=null", "base_url=http://x/v1"])
    r = subprocess.run([sys.executable, "bench/diagnose_autolabel.py", "n=abc"], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-1500:]
    assert r.stderr.strip().splitlines()[-1].startswith("diagnose-autolabel: error: option n='abc': expected int")


def test_meta_sft_rows_render_like_the_labeller_and_grade_by_the_rule():
    """The meta-verification rows: the labeller's prompt (no annotation shown) and the rule's grade against the
    exact checker; a record without exact truth is refused."""
    from training.sft import meta_sft_rows
    from verifier.parser import format_verification, parse_verification
    from verifier.records import Annotation, ProofTrajectory

    t = ProofTrajectory("p1", "q1", "Compute 5 + 3 - 2.", ("5 + 3 = 9", "9 - 2 = 7", "So the answer is 7."),
                        annotation=Annotation(reviewer_comment="SECRET-GOLD", first_fatal_error_step=0))
    outs = [parse_verification(format_verification(v, s, f"Step {s} is wrong.")) for v, s in
            (("invalid", 0), ("invalid", 1), ("invalid", 2), ("valid", -1))]
    rows = meta_sft_rows([(t, o) for o in outs])
    grades = [r["completion"][0]["content"].rsplit("grade: ", 1)[1].split()[0] for r in rows]
    assert grades == ["EXACT_MATCH", "BASIC_MATCH", "POOR_MATCH", "WRONG_POLARITY"]
    prompt = rows[0]["prompt"][-1]["content"]
    assert "SECRET-GOLD" not in prompt and "First error step named by the model: 0" in prompt
    with pytest.raises(Exception, match="record 'x', field 'problem'"):
        meta_sft_rows([(ProofTrajectory("x", "q", "Prove that 2 is prime.", ("It is.",)), outs[0])])
