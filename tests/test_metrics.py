"""Metrics on the real data in ../shared/data (issue 4, item 7) and against independent computations."""

from __future__ import annotations

import random

import numpy as np
import pytest
from sklearn.metrics import confusion_matrix

from verifier.formats import load_opc, load_processbench
from eval.metrics import (
    COLUMNS,
    PassResult,
    Prediction,
    ScoreOptions,
    align_ids,
    flip_rate,
    k_curve,
    metric_table,
    record_row,
    score_predictions,
)
from eval.stats import BootstrapSpec, cluster_bootstrap
from verifier.records import Annotation, MetaGrade, ParseStatus, ProofTrajectory, RecordError, Verdict

FAST = ScoreOptions(bootstrap=BootstrapSpec(n=200, seed=0))


@pytest.fixture(scope="module")
def pb_math(shared_data):
    return load_processbench(shared_data / "processbench" / "math.json")


@pytest.fixture(scope="module")
def opc(shared_data):
    return load_opc(shared_data / "opc_test" / "test.parquet")


def gold_replay(records, grade=True):
    return {r.id: Prediction(r.id, r.annotation.polarity, r.annotation.first_fatal_error_step,
                             MetaGrade.EXACT_MATCH if grade else None, has_meta=grade) for r in records}


def test_gold_replayed_gives_one_everywhere(pb_math, opc):
    for records in (pb_math, opc):
        s = score_predictions(records, gold_replay(records), FAST)
        assert s["n"] == len(records)
        for name, m in s["metrics"].items():
            if m["value"] is None:  # OPC: no located fatal steps -> error_acc undefined, counted
                assert name.startswith("processbench.") and records is opc
                continue
            assert m["value"] == 1.0, name
            assert m["ci"] == [1.0, 1.0], name
        for fld, groups in s["breakdowns"].items():
            for key, g in groups.items():
                for name, m in g["metrics"].items():
                    assert m["value"] in (1.0, None), (fld, key, name)
    s = score_predictions(opc, gold_replay(opc), FAST)
    n_invalid = sum(1 for r in opc if not r.annotation.is_valid)
    assert s["counts"]["processbench_skipped_unknown_step"] == n_invalid > 0
    assert s["metrics"]["processbench.error_acc"]["counts"] == {"pb_err_hit": 0, "pb_err": 0}


def test_always_accept(pb_math, opc):
    for records in (pb_math, opc):
        preds = {r.id: Prediction(r.id, Verdict.VALID) for r in records}
        m = score_predictions(records, preds, FAST)["metrics"]
        assert m["rough.tpr"]["value"] == 1.0
        assert m["rough.tnr"]["value"] == 0.0
        assert m["rough.balanced_f1"]["value"] == 0.0
        assert "meta.tpr" not in m  # no grades given
        assert m["processbench.correct_acc"]["value"] == 1.0
    m = score_predictions(pb_math, {r.id: Prediction(r.id, Verdict.VALID) for r in pb_math}, FAST)["metrics"]
    assert m["processbench.error_acc"]["value"] == 0.0 and m["processbench.f1"]["value"] == 0.0


def test_seeded_random_predictor_matches_sklearn(pb_math):
    rng = random.Random(1234)
    grades = list(MetaGrade)
    preds = {}
    for r in pb_math:
        # valid / invalid (a step or -1 = "invalid, no step") / unparseable (None)
        v = rng.choice([Verdict.VALID, Verdict.INVALID, None])
        step = -1 if v is Verdict.VALID else rng.randrange(-1, len(r.proof_steps))
        preds[r.id] = Prediction(r.id, v, step, rng.choice(grades), has_meta=True)
    s = score_predictions(pb_math, preds, FAST)
    m = s["metrics"]
    y_true = [int(r.annotation.is_valid) for r in pb_math]
    y_pred = [int(preds[r.id].verdict is Verdict.VALID) for r in pb_math]
    tn, fp, fn, tp = confusion_matrix(y_true, y_pred, labels=[0, 1]).ravel()
    tpr, tnr = tp / (tp + fn), tn / (tn + fp)
    assert m["rough.tpr"]["value"] == pytest.approx(tpr)
    assert m["rough.tnr"]["value"] == pytest.approx(tnr)
    assert m["rough.balanced_f1"]["value"] == pytest.approx(2 * tpr * tnr / (tpr + tnr))
    assert m["rough.tpr"]["counts"] == {"tp": tp, "pos": tp + fn}
    # Meta: polarity right AND grade >= BASIC_MATCH, computed independently.
    ok = [int(y_true[i] == y_pred[i] and preds[r.id].meta_grade.reward >= 0.5) for i, r in enumerate(pb_math)]
    tn2, fp2, fn2, tp2 = confusion_matrix(y_true, [yt if o else 1 - yt for yt, o in zip(y_true, ok)],
                                          labels=[0, 1]).ravel()
    assert m["meta.tpr"]["value"] == pytest.approx(tp2 / (tp2 + fn2))
    assert m["meta.tnr"]["value"] == pytest.approx(tn2 / (tn2 + fp2))
    assert m["meta.tnr"]["value"] < m["rough.tnr"]["value"]
    # ProcessBench, written out independently from the raw fields: a correct sample is a hit
    # only when accepted (a rejection with or without a step, or no verdict, is a miss); an
    # erroneous sample is a hit only when rejected at exactly the gold step.
    err, cor = [], []
    for r in pb_math:
        lab, p = r.annotation.first_fatal_error_step, preds[r.id]
        if lab == -1:
            cor.append(p.verdict == Verdict.VALID)
        else:
            err.append(p.verdict == Verdict.INVALID and p.first_error_step == lab)
    assert sum(1 for p in preds.values() if p.verdict is None) > 100  # the unparsed case is exercised
    acc1, acc2 = np.mean(err), np.mean(cor)
    assert m["processbench.error_acc"]["value"] == pytest.approx(acc1)
    assert m["processbench.correct_acc"]["value"] == pytest.approx(acc2)
    assert m["processbench.f1"]["value"] == pytest.approx(2 * acc1 * acc2 / (acc1 + acc2))
    # Every CI contains its point estimate and lies in [0, 1].
    for name, x in m.items():
        lo, hi = x["ci"]
        assert 0 <= lo <= x["value"] <= hi <= 1, name
    assert s["bootstrap"] == {"n": 200, "seed": 0, "level": 0.95, "cluster": "problem_id",
                              "method": "percentile, clustered"}
    # Threshold is configurable: EXACT only is stricter.
    strict = score_predictions(pb_math, preds, ScoreOptions(meta_threshold=MetaGrade.EXACT_MATCH,
                                                            bootstrap=BootstrapSpec(n=0)))
    assert strict["metrics"]["meta.tpr"]["value"] < m["meta.tpr"]["value"]


def test_breakdowns_partition_counts(opc):
    rng = random.Random(0)
    preds = {r.id: Prediction(r.id, rng.choice(list(Verdict))) for r in opc}
    s = score_predictions(opc, preds, ScoreOptions(bootstrap=BootstrapSpec(n=50)))
    by_split = s["breakdowns"]["split"]
    assert len(by_split) > 1
    assert sum(g["n"] for g in by_split.values()) == len(opc)
    assert sum(g["metrics"]["rough.tpr"]["counts"]["tp"] for g in by_split.values()) == \
        s["metrics"]["rough.tpr"]["counts"]["tp"]


def test_cluster_bootstrap_is_wider_when_proofs_share_a_problem():
    # 40 problems x 5 identical proofs: the clustered interval equals that of 40 independent
    # samples, and is much wider than treating the 200 proofs as independent.
    rows = np.array([[1, i % 2] for i in range(40) for _ in range(5)], dtype=float)
    def stat(s):
        return s[:, 1] / s[:, 0]

    spec = BootstrapSpec(n=2000, seed=3)
    lo_c, hi_c = cluster_bootstrap(rows, [i // 5 for i in range(200)], stat, spec)
    lo_i, hi_i = cluster_bootstrap(rows, list(range(200)), stat, spec)
    assert (hi_c - lo_c) > 1.8 * (hi_i - lo_i)
    again = cluster_bootstrap(rows, [i // 5 for i in range(200)], stat, spec)
    assert again == (lo_c, hi_c)  # seeded


def _traj(i, fatal=-1, unknown=False, pid=None):
    return ProofTrajectory(f"r{i}", pid or f"p{i}", "P", ("a", "b", "c"),
                           annotation=Annotation(first_fatal_error_step=fatal, fatal_step_unknown=unknown))


def test_meta_grade_missing_counts_as_incorrect_and_is_counted():
    g = [_traj(0), _traj(1, fatal=1)]
    preds = {"r0": Prediction("r0", Verdict.VALID, meta_grade=None, has_meta=True),
             "r1": Prediction("r1", Verdict.INVALID, 1, MetaGrade.BASIC_MATCH, has_meta=True)}
    s = score_predictions(g, preds, ScoreOptions(bootstrap=BootstrapSpec(n=0)))
    assert s["counts"]["meta_ungraded"] == 1
    assert s["metrics"]["meta.tpr"]["value"] == 0.0 and s["metrics"]["meta.tnr"]["value"] == 1.0
    assert s["metrics"]["rough.tpr"]["value"] == 1.0


def test_processbench_credits_only_accepted_correct_samples():
    # A verifier that emits garbage (no verdict) or "invalid" without a step on every valid
    # proof must score 0 correct_acc, not 100 % (issue 14, item 1).
    g = [_traj(0), _traj(1), _traj(2), _traj(3, fatal=1), _traj(4, fatal=1), _traj(5, fatal=2)]
    preds = {"r0": Prediction("r0", None), "r1": Prediction("r1", Verdict.INVALID, -1),
             "r2": Prediction("r2", Verdict.INVALID, 0),
             "r3": Prediction("r3", Verdict.INVALID, 1),  # hit
             "r4": Prediction("r4", None, 1),  # unparsed verdict with a stray step: miss
             "r5": Prediction("r5", Verdict.VALID, 2)}  # accepted: miss whatever the step
    m = score_predictions(g, preds, ScoreOptions(bootstrap=BootstrapSpec(n=0)))["metrics"]
    assert m["processbench.correct_acc"]["counts"] == {"pb_cor_hit": 0, "pb_cor": 3}
    assert m["processbench.error_acc"]["counts"] == {"pb_err_hit": 1, "pb_err": 3}
    assert m["processbench.f1"]["value"] == 0.0
    ok = score_predictions(g[:1], {"r0": Prediction("r0", Verdict.VALID, 1)}, ScoreOptions(bootstrap=BootstrapSpec(n=0)))
    assert ok["metrics"]["processbench.correct_acc"]["value"] == 1.0


def test_unparsed_verdict_is_a_rejection_and_counted():
    g = [_traj(0), _traj(1, fatal=0)]
    preds = {"r0": Prediction("r0", None), "r1": Prediction("r1", None)}
    s = score_predictions(g, preds, ScoreOptions(bootstrap=BootstrapSpec(n=0)))
    assert s["counts"]["unparsed_verdict"] == 2
    assert s["metrics"]["rough.tpr"]["value"] == 0.0 and s["metrics"]["rough.tnr"]["value"] == 1.0
    # ProcessBench: an invalid verdict without a step is not an exact hit
    assert s["metrics"]["processbench.error_acc"]["value"] == 0.0


def test_prediction_parsing_errors_name_record_and_field():
    with pytest.raises(RecordError, match=r"record 'x', field 'passes\[1\].verdict'"):
        Prediction.from_dict({"id": "x", "verdict": "valid",
                              "passes": [{"index": 0, "verdict": "valid"}, {"index": 1, "verdict": "nah"}]}, line=3)
    with pytest.raises(RecordError, match=r"record 'y', field 'meta_grade'"):
        Prediction.from_dict({"id": "y", "verdict": "valid", "meta_grade": "GREAT"})
    with pytest.raises(RecordError, match=r"field 'verdict': missing"):
        Prediction.from_dict({"id": "z"})
    p = Prediction.from_dict({"id": "w", "verdict": None, "passes": [
        {"index": 1, "verdict": None, "first_error_step": -1, "parse_status": "no_answer_block", "text": "?"},
        {"index": 0, "verdict": "invalid", "first_error_step": 2, "parse_status": "ok", "text": "..."}]})
    assert [q.index for q in p.passes] == [0, 1] and p.passes[1].parse_status is ParseStatus.NO_ANSWER_BLOCK


def test_align_ids():
    a = align_ids(["a", "b", "c"], ["c", "a", "d"], allow_missing=True)
    assert a.common == ["a", "c"] and a.missing_predictions == ["b"] and a.unknown_predictions == ["d"]
    with pytest.raises(RecordError, match="record 'd'.*in predictions but not in gold"):
        align_ids(["a"], ["a", "d"])


def _passes(*vs):
    return tuple(PassResult(i, None if v is None else Verdict(v), 1 if v == "invalid" else -1,
                            ParseStatus.OK if v else ParseStatus.NO_ANSWER_BLOCK) for i, v in enumerate(vs))


def test_k_curve_pessimistic_is_monotone_and_matches_hand_count():
    gold = [_traj(0), _traj(1), _traj(2, fatal=1), _traj(3, fatal=1)]
    passes = [_passes("valid", "valid", "valid", "valid"),
              _passes("valid", "valid", "invalid", "valid"),
              _passes("valid", "invalid", "invalid", "invalid"),
              _passes("invalid", None, "valid", "valid")]
    curve = k_curve(gold, passes, None)
    pess = [r for r in curve if r["policy"] == "pessimistic"]
    assert [r["k"] for r in pess] == [1, 2, 3, 4]
    assert [r["acceptance"]["value"] for r in pess] == [0.75, 0.5, 0.25, 0.25]
    assert [r["metrics"]["rough.tpr"]["value"] for r in pess] == [1.0, 1.0, 0.5, 0.5]
    assert [r["metrics"]["rough.tnr"]["value"] for r in pess] == [0.5, 1.0, 1.0, 1.0]
    maj = curve[-1]
    assert maj["policy"] == "majority" and maj["k"] == 4
    # r0 4/4 and r1 3/4 accept; r2 1/4; r3 2/4 (the unparsed pass counts as a rejection) -> not a majority
    assert maj["acceptance"]["value"] == 0.5
    # the aggregated first error step is the earliest step of a rejecting pass (1 = gold for r2, r3)
    assert maj["metrics"]["processbench.error_acc"]["value"] == 1.0


def test_flip_rate_on_score():
    gold = [_traj(0), _traj(1, fatal=1)]
    preds = {"r0": Prediction("r0", Verdict.VALID, passes=_passes("valid", "valid")),
             "r1": Prediction("r1", Verdict.INVALID, 1, passes=_passes("valid", "invalid"))}
    s = score_predictions(gold, preds, ScoreOptions(bootstrap=BootstrapSpec(n=0)))
    assert s["flip"]["pairwise"]["value"] == 0.5 and s["flip"]["unstable"]["counts"] == {
        "unstable": 1, "records": 2}
    assert [r["k"] for r in s["k_curve"]] == [1, 2, 2]
    f = flip_rate([_passes("valid", None)], spec=None)
    assert f["pairwise"]["value"] is None and f["records_with_fewer_than_2_parsed_passes"] == 1


def test_metric_table_rows_match_record_row():
    g = _traj(0, fatal=2)
    row = record_row(g, Prediction("r0", Verdict.INVALID, 2, MetaGrade.EXACT_MATCH))
    t = metric_table(np.array([row]), ["p0"], ["meta.tnr", "processbench.f1"], None)
    assert t["meta.tnr"]["value"] == 1.0
    # no correct samples: correct_acc is undefined, so is the harmonic mean (None, not a fake 0)
    assert t["processbench.f1"]["value"] is None
    assert len(row) == len(COLUMNS)
