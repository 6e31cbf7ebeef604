"""Importers of the real sets in ../shared/data assert the published counts."""

import pytest

from data_pipeline.importers import gold_summary, load_any, load_opc, load_processbench


@pytest.mark.parametrize("split,err,ok", [("gsm8k", 207, 193), ("math", 594, 406),
                                          ("olympiadbench", 661, 339), ("omnimath", 759, 241)])
def test_processbench_counts(shared_data, split, err, ok):
    recs = load_processbench(shared_data / "processbench" / f"{split}.json")
    s = gold_summary(recs)
    assert (s["invalid"], s["valid"]) == (err, ok)
    bad = next(r for r in recs if not r.annotation.is_valid)
    assert 0 <= bad.annotation.first_fatal_error_step < len(bad.proof_steps)
    assert all(r.split == split for r in recs)


def test_opc_counts_and_gold_is_human(shared_data):
    recs = load_opc(shared_data / "opc_test" / "test.parquet")
    s = gold_summary(recs)
    assert (s["n"], s["invalid"], s["valid"]) == (434, 273, 161)
    assert len({r.id for r in recs}) == 434
    with_comments = [r for r in recs if r.annotation.reviewer_comment]
    assert len(with_comments) == 36
    assert all(r.problem and len(r.proof_steps) >= 1 for r in recs)
    # the LLM judgment never leaks into gold
    assert not any("llm" in r.annotation.reviewer_comment.lower()[:20] for r in recs)


def test_load_any_dispatch(shared_data):
    assert len(load_any(shared_data / "processbench" / "gsm8k.json").records) == 400
