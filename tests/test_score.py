"""`python -m eval.score` on the real data: file formats, id checks, metrics.json contract, W&B offline."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from verifier.formats import load_processbench
from eval.score import ScoreConfig, run
from verifier.config import compose
from verifier.io import DatasetError, write_jsonl
from verifier.records import RecordError

REPO = Path(__file__).resolve().parents[1]
KEYS = ["rough.tpr", "rough.tnr", "rough.balanced_f1", "meta.tpr", "meta.tnr", "meta.balanced_f1",
        "processbench.error_acc", "processbench.correct_acc", "processbench.f1"]


@pytest.fixture(scope="module")
def gsm8k(shared_data):
    return shared_data / "processbench" / "gsm8k.json"


def _gold_rows(records, grade="EXACT_MATCH"):
    return [{"id": r.id, "verdict": r.annotation.polarity.value,
             "first_error_step": r.annotation.first_fatal_error_step, "meta_grade": grade} for r in records]


def _cfg(tmp_path, gold, preds, *extra):
    return compose("score", ScoreConfig, [f"gold={gold}", f"predictions={preds}", f"out={tmp_path / 'out'}",
                                          "bootstrap_n=200", *extra])


def test_cli_gold_replay_processbench(tmp_path, gsm8k):
    """The command line contract: metrics.json keys, fractions in [0,1], the table, last line."""
    preds = tmp_path / "preds.jsonl"
    write_jsonl(preds, _gold_rows(load_processbench(gsm8k)))
    out = tmp_path / "out"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-m", "eval.score", f"gold={gsm8k}", f"predictions={preds}", f"out={out}",
                        "bootstrap_n=100"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "rough.balanced_f1" in p.stdout and "VerifierBench scores" in p.stdout
    assert p.stdout.strip().splitlines()[-1] == f"wrote {out / 'metrics.json'}"
    doc = json.loads((out / "metrics.json").read_text())
    for k in KEYS:
        assert doc[k]["value"] == 1.0, k
        assert 0 <= doc[k]["ci"][0] <= doc[k]["ci"][1] <= 1
        assert doc[k]["counts"]
    assert doc["n"] == 400 and doc["bootstrap"]["n"] == 100
    assert (out / "report.md").exists() and (out / "tpr_tnr.png").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "outputs").exists()  # hydra writes nothing into the cwd


def test_opc_parquet_and_our_jsonl_gold(tmp_path, shared_data):
    from verifier.formats import load_opc

    opc = load_opc(shared_data / "opc_test" / "test.parquet")
    preds = tmp_path / "p.jsonl"
    write_jsonl(preds, [{"id": r.id, "verdict": "valid", "first_error_step": -1} for r in opc])
    doc = run(_cfg(tmp_path, shared_data / "opc_test" / "test.parquet", preds, "report=false"))
    assert doc["rough.tpr"]["value"] == 1.0 and doc["rough.tnr"]["value"] == 0.0
    assert doc["rough.balanced_f1"]["value"] == 0.0
    assert "meta.tpr" not in doc  # no grades given
    assert doc["counts"]["processbench_skipped_unknown_step"] == doc["counts"]["invalid"]
    # the same gold as our own JSONL gives the same numbers
    ours = tmp_path / "gold.jsonl"
    write_jsonl(ours, opc)
    doc2 = run(_cfg(tmp_path, ours, preds, "report=false"))
    assert doc2["rough.tpr"] == doc["rough.tpr"] and doc2["rough.tnr"] == doc["rough.tnr"]


def test_missing_ids_error_names_them_or_are_counted(tmp_path, gsm8k):
    records = load_processbench(gsm8k)
    rows = _gold_rows(records)
    dropped = rows.pop(7)["id"]
    rows.append({"id": "not-in-gold", "verdict": "valid", "first_error_step": -1})
    preds = tmp_path / "p.jsonl"
    write_jsonl(preds, rows)
    with pytest.raises(RecordError, match=f"record '{dropped}', field 'id': in gold but not in predictions"):
        run(_cfg(tmp_path, gsm8k, preds))
    doc = run(_cfg(tmp_path, gsm8k, preds, "allow_missing=true"))
    assert doc["ids"]["missing_predictions"] == [dropped]
    assert doc["ids"]["unknown_predictions"] == ["not-in-gold"]
    assert doc["n"] == 399 and doc["rough.balanced_f1"]["value"] == 1.0
    assert "Ids not scored" in (tmp_path / "out" / "report.md").read_text()


def test_bad_prediction_rows_are_named(tmp_path, gsm8k):
    rows = _gold_rows(load_processbench(gsm8k))
    rows[3]["verdict"] = "probably"
    rows[5]["meta_grade"] = "SUPERB"
    rows.append(dict(rows[0]))
    preds = tmp_path / "p.jsonl"
    write_jsonl(preds, rows)
    with pytest.raises(DatasetError) as e:
        run(_cfg(tmp_path, gsm8k, preds))
    msg = str(e.value)
    assert f"record '{rows[3]['id']}', field 'verdict'" in msg and "line 4" in msg
    assert f"record '{rows[5]['id']}', field 'meta_grade'" in msg
    assert f"record '{rows[0]['id']}', field 'id': duplicate" in msg


def test_gold_without_annotation_is_an_error(tmp_path):
    gold = tmp_path / "g.jsonl"
    write_jsonl(gold, [{"id": "a", "problem_id": "p", "problem": "P", "proof_steps": ["x"]}])
    preds = tmp_path / "p.jsonl"
    write_jsonl(preds, [{"id": "a", "verdict": "valid", "first_error_step": -1}])
    with pytest.raises(DatasetError, match="record 'a', field 'annotation'"):
        run(_cfg(tmp_path, gold, preds))


def test_random_predictions_with_passes_and_wandb_offline(tmp_path, gsm8k, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    records = load_processbench(gsm8k)[:60]
    gold = tmp_path / "gold.jsonl"
    write_jsonl(gold, records)
    rng = random.Random(5)
    rows = []
    for r in records:
        vs = [rng.choice(["valid", "invalid"]) for _ in range(3)]
        passes = [{"index": i, "verdict": v, "first_error_step": -1 if v == "valid" else 0,
                   "parse_status": "ok", "text": "..."} for i, v in enumerate(vs)]
        acc = all(p["verdict"] == "valid" for p in passes)
        rows.append({"id": r.id, "verdict": "valid" if acc else "invalid", "first_error_step": -1 if acc else 0,
                     "meta_grade": rng.choice(["EXACT_MATCH", "POOR_MATCH", None]), "passes": passes})
    preds = tmp_path / "p.jsonl"
    write_jsonl(preds, rows)
    doc = run(_cfg(tmp_path, gold, preds, "wandb.enabled=true", "meta_threshold=POOR_MATCH"))
    assert doc["meta_threshold"] == "POOR_MATCH"
    assert doc["counts"]["meta_ungraded"] == sum(1 for r in rows if r["meta_grade"] is None)
    assert [r["k"] for r in doc["k_curve"]] == [1, 2, 3, 3]
    # k = n of the pessimistic curve reproduces the aggregated verdicts given
    assert doc["k_curve"][2]["metrics"]["rough.tpr"]["value"] == doc["rough.tpr"]["value"]
    # ... and each k counts the records whose first k passes all accept (computed here from the rows)
    for k in (1, 2, 3):
        want = sum(all(p["verdict"] == "valid" for p in r["passes"][:k]) for r in rows)
        assert doc["k_curve"][k - 1]["acceptance"]["counts"] == {"accepted": want, "n": 60}, k
    assert 0 < doc["counts"]["accepted"] < 60
    assert 0 <= doc["flip"]["pairwise"]["value"] <= 1
    runs = list((tmp_path / "out" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].rglob("*.wandb"))
    report = (tmp_path / "out" / "report.md").read_text()
    assert "k_curve.png" in report and (tmp_path / "out" / "k_curve.png").exists()


def test_scores_rows_written_by_the_judging_engine(tmp_path, gsm8k):
    """Predictions in the exact ``eval.judge`` format (``verifier.judgment.Judgment.to_row``)."""
    from verifier.aggregate import AggregationPolicy, aggregate
    from verifier.judgment import Judgment
    from verifier.parser import format_verification, parse_verification

    records = load_processbench(gsm8k)[:40]
    gold = tmp_path / "gold.jsonl"
    write_jsonl(gold, records)
    rng = random.Random(9)
    rows, expected_accept = [], 0
    tp = tn = 0
    for r in records:
        # mostly-accepting passes, so that all-4-accept (pessimistic acceptance) happens; a valid
        # verdict carries step -1, an invalid one step 0 (both parse)
        vs = [rng.choice(["valid"] * 5 + ["invalid"]) for _ in range(4)]
        texts = [format_verification(v, -1 if v == "valid" else 0, "why") for v in vs]
        passes = [parse_verification(t, len(r.proof_steps)) for t in texts]
        assert all(p.ok for p in passes)
        agg = aggregate(passes, AggregationPolicy(n=4))
        accepted = all(v == "valid" for v in vs)
        assert agg.accepts == accepted
        expected_accept += accepted
        tp += accepted and r.annotation.is_valid
        tn += not accepted and not r.annotation.is_valid
        rows.append(Judgment(r.id, agg, passes, seeds=list(range(4)), n=4).to_row())
    assert 5 < expected_accept < 35  # acceptance and rejection are both exercised
    preds = tmp_path / "judge.jsonl"
    write_jsonl(preds, rows)
    doc = run(_cfg(tmp_path, gold, preds, "report=false"))
    assert doc["counts"]["accepted"] == expected_accept
    assert doc["k_curve"][3]["acceptance"]["counts"] == {"accepted": expected_accept, "n": 40}
    assert doc["rough.tpr"]["counts"]["tp"] == tp and doc["rough.tnr"]["counts"]["tn"] == tn
    assert "meta.tpr" not in doc
