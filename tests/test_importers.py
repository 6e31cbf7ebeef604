"""Importers of the real sets in ../shared/data assert the published counts."""

import pytest

from verifier.formats import gold_summary, load_any, load_opc, load_processbench


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


def test_records_sharing_a_problem_share_a_problem_id(shared_data):
    # gsm8k: 400 proofs of 375 distinct problems (issue 14, item 2): proofs of one problem
    # are one cluster, whatever the file they come from.
    import json

    from verifier.identity import problem_id_of

    path = shared_data / "processbench" / "gsm8k.json"
    recs = load_processbench(path)
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert len({" ".join(r["problem"].split()) for r in raw}) == len({r.problem_id for r in recs}) == 375
    by_text: dict[str, set[str]] = {}
    for r in recs:
        by_text.setdefault(" ".join(r.problem.split()), set()).add(r.problem_id)
    assert all(len(v) == 1 for v in by_text.values())
    a, b = next((x, y) for i, x in enumerate(recs) for y in recs[i + 1:] if x.problem == y.problem)
    assert a.problem_id == b.problem_id == problem_id_of(a.problem) and a.id != b.id
    assert problem_id_of("  Find  x.\n") == problem_id_of("Find x.") != problem_id_of("Find y.")
    opc = load_opc(shared_data / "opc_test" / "test.parquet")
    assert all(r.problem_id == problem_id_of(r.problem) for r in opc)
    assert len({r.problem_id for r in opc}) == 98 and all(r.meta["source_problem_id"] for r in opc)


def test_held_out_split_of_processbench_keeps_problems_on_one_side(shared_data):
    from data_pipeline.splits import split_by_problem

    recs = load_processbench(shared_data / "processbench" / "gsm8k.json")
    s = split_by_problem(recs, held_out_size=94, seed=0)
    texts = {r.problem for r in s.held_out}
    assert not [r.id for r in s.train if r.problem in texts]


def test_one_dispatch_tells_a_parquet_by_its_columns(shared_data, tmp_path):
    import pandas as pd

    from verifier.errors import InputError
    from verifier.formats import format_of

    assert format_of(shared_data / "opc_test" / "test.parquet") == "opc"
    assert format_of(shared_data / "processbench") == "folder"
    assert len(load_any(shared_data / "processbench").records) == 3400
    pd.DataFrame({"question": ["?"]}).to_parquet(tmp_path / "other.parquet")
    with pytest.raises(InputError, match=r"other\.parquet.*OPC.*ingested"):
        load_any(tmp_path / "other.parquet")
    (tmp_path / "x.txt").write_text("{}")
    with pytest.raises(InputError, match=r"x\.txt: unknown format"):
        load_any(tmp_path / "x.txt")
