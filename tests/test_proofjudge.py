"""ProofJudge: rubric parsing and weights, alignment statistics, end to end on vLLM with replicates."""

import json

import pytest

from eval.judges.core import answer_regex
from eval.proofjudge import Dimension, ProofJudgeConfig, alignment_stats, run, weighted_score
from eval.stats import BootstrapSpec, sign_test
from verifier.config import compose
from verifier.io import read_jsonl
from verifier.parser import parse_rubric_scores

DATA = "tests/data/proofjudge_illustrative.jsonl"  # hand-written, illustrative: NOT the ProofJudge dataset


def test_default_config_has_the_papers_five_dimensions():
    cfg = compose("proofjudge", ProofJudgeConfig)
    assert [d.name for d in cfg.dimensions] == ["library_leverage", "automation_fit", "structural_clarity",
                                                "statement_quality", "mathlib_conventions"]
    assert (cfg.low, cfg.high, cfg.judge.n) == (1, 10, 3)


def test_rubric_parse_and_weights():
    dims = [Dimension("Library leverage", weight=2), Dimension("automation_fit", weight=1)]
    a = parse_rubric_scores("ok\n<final_answer>\n**library_leverage**: 9\nautomation fit: 3/10\n</final_answer>",
                            ["library_leverage", "automation_fit"])
    assert a.ok and weighted_score(a.value, dims) == pytest.approx(7.0)
    for text, status in [("no block", "no_answer_block"), ("<final_answer>library_leverage: 9</final_answer>",
                                                           "missing_field"),
                         ("<final_answer>library_leverage: 0\nautomation_fit: 2</final_answer>", "bad_value"),
                         ("<final_answer>library_leverage: high\nautomation_fit: 2</final_answer>", "bad_value"),
                         ("<final_answer>library_leverage: 3\nlibrary_leverage: 4\nautomation_fit: 2</final_answer>",
                          "ambiguous")]:
        assert parse_rubric_scores(text, ["library_leverage", "automation_fit"]).status.value == status
    assert "automation_fit: ([1-9]|10)" in answer_regex("rubric_scores", ["automation fit"])


def test_alignment_stats_by_hand():
    acc = [[8, 7, 7], [5, 6, None], [9, 9, 9], [4, 4, 4]]
    rej = [[6, 7, 2], [4, 3, 5], [2, 1, 3], [5, 5, 4]]
    s = alignment_stats(acc, rej, spec=BootstrapSpec(n=500))
    # cells: item0 1,0,1; item1 1,1,-; item2 1,1,1; item3 0,0,0 (last one a tie) -> 7 of 11
    assert s["alignment"] == pytest.approx(7 / 11) and s["n_unparseable_cells"] == 1
    assert s["sign_test"] == {"wins": 3, "losses": 1, "ties": 0, "p": sign_test(3, 1)}
    assert [r["alignment"] for r in s["per_replicate"]] == pytest.approx([3 / 4, 2 / 4, 2 / 3])
    assert s["flip"]["unstable"] == pytest.approx(1 / 4)  # only item0's verdicts differ
    assert s["ci"][0] <= s["alignment"] <= s["ci"][1]
    half = alignment_stats([[5, 5]], [[5, 4]], ties="half", spec=BootstrapSpec(n=50))
    assert half["alignment"] == pytest.approx(0.75)
    with pytest.raises(ValueError):
        alignment_stats([[1]], [[1]], ties="coin")


@pytest.mark.vllm
def test_end_to_end_rubric_replicates(endpoint, tmp_path):
    """Configurable dimensions and weights, 3 replicates, structured outputs; plus our verifier's pass noise."""
    vrows = tmp_path / "judge_rows.jsonl"
    vrows.write_text("\n".join(json.dumps({"id": f"t{i}", "verdict": "invalid", "passes": [
        {"index": k, "verdict": v, "first_error_step": -1, "parse_status": "ok" if v else "no_answer_block", "text": ""}
        for k, v in enumerate(p)]}) for i, p in enumerate([["valid"] * 4, ["valid", "invalid", None, "valid"]])))
    cfg = compose("proofjudge", ProofJudgeConfig, [
        f"out={tmp_path / 'out'}", f"input={DATA}", "progress=false", "judge.structured=true", "judge.max_tokens=64",
        "judge.rationale_chars=0",
        "judge.n=3", "judge_name=tiny", f"verifier_rows={vrows}", "bootstrap.n=300",
        "dimensions=[{name: library_leverage, description: reuse, weight: 3}, "
        "{name: structural_clarity, description: structure, weight: 1}]"])
    cfg.endpoint = endpoint
    res = run(cfg)
    rows = list(read_jsonl(tmp_path / "out" / "proofjudge_judgments.jsonl"))
    assert len(rows) == 6 and res["parse_counts"] == {"ok": 36}
    acc, rej = [], []
    for r in rows:
        for side, store in (("accepted", acc), ("rejected", rej)):
            calls = r[side]["calls"]
            assert len(calls) == 3 and len({c["seed"] for c in calls}) == 3
            for c, s in zip(calls, r[side]["scores"]):
                v = c["value"]
                assert set(v) == {"library_leverage", "structural_clarity"} and all(1 <= x <= 10 for x in v.values())
                assert s == pytest.approx((3 * v["library_leverage"] + v["structural_clarity"]) / 4)
            store.append(r[side]["scores"])
    cells = [a > b for ra, rb in zip(acc, rej) for a, b in zip(ra, rb)]
    a = res["alignment"]
    assert a["alignment"] == pytest.approx(sum(cells) / len(cells)) and a["n_cells"] == 18
    assert len(a["per_replicate"]) == 3 and a["ci"][0] <= a["alignment"] <= a["ci"][1]
    assert res["verifier_pass_noise"]["n_unparseable"] == 1
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| tiny |" in report and "Our verifier's passes" in report
    assert (tmp_path / "out" / "proofjudge.png").stat().st_size > 0


@pytest.mark.vllm
def test_unparseable_rubrics_are_counted(endpoint, tmp_path):
    cfg = compose("proofjudge", ProofJudgeConfig, [f"out={tmp_path}", f"input={DATA}", "progress=false",
                                                   "judge.max_tokens=8", "judge.n=2", "bootstrap.n=50"])
    cfg.endpoint = endpoint
    res = run(cfg)
    a = res["alignment"]
    assert a["n_unparseable_cells"] == 12 and a["alignment"] is None and a["ci"] == [None, None]
    assert "ok" not in res["parse_counts"] and sum(res["parse_counts"].values()) == 24
    assert "| 12 |" in (tmp_path / "report.md").read_text()
