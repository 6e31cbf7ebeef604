"""TCS-Bench: 3-of-4 vote verifier as its judge config's policy, routing logic, end to end with two generators on vLLM."""

import json

import pytest
from conftest import LORA_NAME
from sklearn.metrics import roc_auc_score

from eval.tcs import TCSConfig, load_records, route, routing_table, run
from verifier.aggregate import AggregationPolicy, aggregate
from verifier.config import compose
from verifier.io import read_jsonl
from verifier.parser import parse_critique
from verifier.records import RecordError

DATA = "tests/data/tcs_illustrative.jsonl"  # hand-written, illustrative: NOT TCS-Bench


def test_vote_verifier_is_its_judge_configs_policy():
    cfg = compose("tcs", TCSConfig)
    assert cfg.verifier.aggregation() == AggregationPolicy("k_of_n", n=4, k=3)
    assert cfg.verifier.n == 4 and cfg.verifier.template == "tcs_verify" and cfg.verifier.parser == "critique"
    yes, no, bad = (parse_critique(f"<final_answer>verdict: {v}</final_answer>") for v in ("correct", "incorrect", "??"))
    pol = cfg.verifier.aggregation()
    assert aggregate([yes, yes, yes, no], pol).accepts
    assert not aggregate([yes, yes, no, no], pol).accepts
    assert not aggregate([yes, yes, bad, yes][:3] + [no], pol).accepts  # unparseable counts as a rejection
    assert aggregate([yes, yes, yes, bad], pol).n_unparseable == 1



def test_old_policy_keys_still_work(capsys):
    cfg = compose("tcs", TCSConfig, ["verifier_policy.kind=majority", "verifier_policy.n=5", "self_policy.k=1",
                                     "self_policy.kind=k_of_n", "verifier_policy.unparseable=ignore"])
    assert cfg.verifier.aggregation() == AggregationPolicy("majority", n=5, k=3, unparseable="ignore")
    assert cfg.self_verifier.aggregation() == AggregationPolicy("k_of_n", n=1, k=1)
    assert "note: verifier_policy.kind is now verifier.policy" in capsys.readouterr().err


def test_routing_against_direct_enumeration():
    import itertools

    rows = [dict(gold_a=ga, gold_b=gb, self_a=sa, crit_a=c)
            for ga, gb, sa, c in itertools.product([True, False], [True, False], [True, False], range(0, 9, 2))]
    for t in range(9):
        tab = routing_table(rows, t, 8)
        expect = sum(r["gold_b"] if (not r["self_a"] or r["crit_a"] <= t) else r["gold_a"] for r in rows)
        assert tab["cross_model"]["solved"] == expect and tab["sweep"][t] == expect / len(rows)
    tab = routing_table(rows, 4, 8)
    assert tab["self_rejection"]["solved"] == sum(r["gold_a"] if r["self_a"] else r["gold_b"] for r in rows)
    assert tab["oracle"]["solved"] == sum(r["gold_a"] or r["gold_b"] for r in rows)
    assert tab["cross_model"]["picked_a"] + tab["cross_model"]["picked_b"] == len(rows)
    assert route(True, 5, None) == "a" and route(False, 8, 8) == "b"


def test_bad_records(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps({"id": "x1", "context": "c", "statement": "s", "reference_proof": "r", "label_a": "yes"}))
    with pytest.raises(RecordError, match="'x1'.*'label_a'"):
        load_records(p)
    assert len(load_records(p, on_error="skip")[1]) == 1


@pytest.mark.vllm
def test_end_to_end_two_generators(endpoint, tmp_path):
    """A = base tiny model, B = its LoRA adapter; proofs generated for tasks lacking them; votes unstructured
    (random weights: unparseable, counted, rejected), self-verifier and critiques structured (parseable)."""
    src = list(read_jsonl(DATA))
    for d in src[:3]:  # these get fresh proofs from both generators (and lose their human labels)
        for k in ("proof_a", "proof_b", "label_a", "label_b"):
            d.pop(k)
    data = tmp_path / "tcs.jsonl"
    data.write_text("\n".join(json.dumps(d) for d in src))
    cfg = compose("tcs", TCSConfig, [
        f"input={data}", f"out={tmp_path / 'out'}", "progress=false", "generator_a.max_tokens=24",
        f"generator_b.model={LORA_NAME}", "generator_b.max_tokens=24", "verifier.max_tokens=8",
        "self_verifier.structured=true", "self_verifier.max_tokens=64", "self_verifier.temperature=1.0",
        "critic.structured=true", "critic.max_tokens=64", "threshold=4"])
    cfg.endpoint = endpoint
    res = run(cfg)
    rows = list(read_jsonl(tmp_path / "out" / "tcs_judgments.jsonl"))
    assert res["n_generated"] == {"a": 3, "b": 3} and len(rows) == 6
    assert res["gold_from_human"] == {"a": 3, "b": 3}
    for r in rows[:3]:  # unstructured random-weight votes: unparseable -> rejected by 3-of-4
        assert r["verifier_a_unparseable"] == 4 and r["verifier_a"] is False
        assert r["gold_a_source"] == "vote_verifier" and r["gold_a"] is False
    for r in rows:
        assert all(c["parse_status"] == "ok" for c in r["calls"]["crit_a"] + r["calls"]["self_a"])
        assert len(r["calls"]["crit_a"]) == 8 and 0 <= r["crit_a"] <= 8
        assert r["pick"] == route(r["self_a"], r["crit_a"], 4)
    assert sum(v for k, v in res["parse_counts"].items() if k != "ok") == 6 * 4 * 2  # all votes, counted
    human = [r for r in rows if r["gold_a_source"] == "human"]
    assert [r["gold_a"] for r in human] == [True, False, True]  # the hand labels of ill-t4..t6
    labels = [r["gold_a"] for r in rows]  # both classes present: AUC defined
    assert res["auc"]["B_on_A"] == pytest.approx(roc_auc_score(labels, [r["crit_a"] / 8 for r in rows]))
    labels_b = [r["gold_b"] for r in rows]
    assert res["auc"]["A_on_B"] == pytest.approx(roc_auc_score(labels_b, [r["crit_b"] / 8 for r in rows]))
    t = res["routing"]
    assert t["oracle"]["solved"] >= max(t["a"]["solved"], t["b"]["solved"], t["cross_model"]["solved"])
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Oracle best-of-two" in report and "Cross-model selection" in report
    assert (tmp_path / "out" / "tcs_sweep.png").stat().st_size > 0
