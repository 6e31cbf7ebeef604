"""GRPO dataset rows and the Table 3 data variants (base, + extra annotation, + positive augmentation)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from data_pipeline.grpo_dataset import GRPO_COLUMNS, GrpoDataConfig, trajectory_from_row, variant_trajectories
from data_pipeline.synthetic import generate_synthetic
from verifier.io import load_trajectories, write_jsonl

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def sources(tmp_path):
    base = generate_synthetic(20, seed=0, id_prefix="base")
    extra = generate_synthetic(10, seed=1, id_prefix="extra", valid_fraction=0.1)
    aug = generate_synthetic(6, seed=2, id_prefix="aug", valid_fraction=1.0)
    held = generate_synthetic(6, seed=3, id_prefix="held")
    rows = [t.to_dict() for t in extra]
    rows[0]["annotation"]["report_error_case"], rows[0]["annotation"]["remark"] = True, "garbled"
    del rows[1]["annotation"]
    for name, data in (("base", base), ("extra", rows), ("aug", aug), ("held", held)):
        write_jsonl(tmp_path / f"{name}.jsonl", data)
    return tmp_path, base, extra, aug


def test_variants_select_sources(sources):
    d, base, extra, aug = sources
    cfg = GrpoDataConfig(base=str(d / "base.jsonl"), extra=str(d / "extra.jsonl"), augmented=str(d / "aug.jsonl"),
                         held_out=str(d / "held.jsonl"))
    t0, _ = variant_trajectories(cfg)
    t1, c1 = variant_trajectories(dataclasses.replace(cfg, variant="extra_ann"))
    t2, c2 = variant_trajectories(dataclasses.replace(cfg, variant="pos_aug"))
    assert (len(t0), len(t1), len(t2)) == (20, 28, 34)
    assert c2["by_origin"] == {"base": 20, "extra": 8, "augmented": 6}
    assert c1["skipped"] == {"extra:report_error_case": 1, "extra:unannotated": 1}
    assert {t.id for t in t2} == {t.id for t in base} | {t.id for t in extra[2:]} | {t.id for t in aug}
    assert c2["polarity"]["valid"] - c1["polarity"]["valid"] == 6  # augmentation adds positives
    assert [t.id for t in variant_trajectories(cfg)[0]] == [t.id for t in t0]  # seeded shuffle
    with pytest.raises(ValueError, match="field 'extra'"):
        variant_trajectories(dataclasses.replace(cfg, variant="extra_ann", extra=None))
    with pytest.raises(ValueError, match="unannotated|report_error_case"):
        variant_trajectories(dataclasses.replace(cfg, variant="extra_ann", unusable="error"))
    with pytest.raises(ValueError, match="duplicate id"):
        variant_trajectories(dataclasses.replace(cfg, variant="extra_ann", extra=str(d / "base.jsonl")))
    with pytest.raises(ValueError, match="held-out"):
        variant_trajectories(dataclasses.replace(cfg, held_out=str(d / "base.jsonl")))


def test_an_empty_extra_or_augmented_source_is_refused(sources):
    """extra_ann with an extra source of no usable record (or pos_aug with no augmented one) would train on
    the smaller variant's data under the bigger variant's name: refused, naming variant, source key and path."""
    d, base, extra, aug = sources
    (d / "empty.jsonl").write_text("")
    write_jsonl(d / "unusable.jsonl", [{k: v for k, v in t.to_dict().items() if k != "annotation"} for t in aug])
    cfg = GrpoDataConfig(base=str(d / "base.jsonl"), extra=str(d / "extra.jsonl"), augmented=str(d / "aug.jsonl"))
    for variant, key, path in (("extra_ann", "extra", d / "empty.jsonl"), ("pos_aug", "augmented", d / "empty.jsonl"),
                               ("pos_aug", "augmented", d / "unusable.jsonl")):
        with pytest.raises(ValueError, match=rf"field '{key}': variant '{variant}' .*{path}") as ei:
            variant_trajectories(dataclasses.replace(cfg, variant=variant, **{key: str(path)}))
        assert ("unannotated 6" if path.name == "unusable.jsonl" else "no records") in str(ei.value)
    assert variant_trajectories(dataclasses.replace(cfg, variant="pos_aug"))[1]["by_origin"]["augmented"] == 6


def test_a_held_out_problem_under_another_id_is_a_leak(sources):
    """A training record whose problem text is a held-out problem's is refused even when its problem_id
    differs (a candidate set generated apart names its problems with its own prefix)."""
    d, base, *_ = sources
    twin = dataclasses.replace(generate_synthetic(2, seed=9, id_prefix="cand")[0], problem=base[0].problem + "  ")
    write_jsonl(d / "held_twin.jsonl", [base[0]])
    write_jsonl(d / "base_rest.jsonl", [*(t for t in base if t.problem_id != base[0].problem_id), twin])
    cfg = GrpoDataConfig(base=str(d / "base_rest.jsonl"), held_out=str(d / "held_twin.jsonl"))
    with pytest.raises(ValueError, match=rf"record '{twin.id}', field 'problem'.*{base[0].id}"):
        variant_trajectories(cfg)

def test_cli_writes_rows_the_reward_reads(sources):
    d, *_ = sources
    r = subprocess.run([sys.executable, "-m", "data_pipeline.grpo_dataset", "variant=pos_aug",
                        f"base={d / 'base.jsonl'}", f"extra={d / 'extra.jsonl'}", f"augmented={d / 'aug.jsonl'}",
                        f"held_out={d / 'held.jsonl'}", f"out={d / 'out'}"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "34 rows" in r.stdout
    from datasets import load_from_disk

    ds = load_from_disk(str(d / "out" / "dataset"))
    assert tuple(ds.column_names) == GRPO_COLUMNS and ds.num_rows == 34
    trajs = load_trajectories(d / "out" / "trajectories.jsonl").records
    for row, t in zip(ds, trajs):
        assert row["id"] == t.id and row["gold_verdict"] == t.annotation.polarity.value
        assert row["first_fatal_error_step"] == t.annotation.first_fatal_error_step
        assert row["recoverable_error_steps"] == list(t.annotation.recoverable_error_steps)
        assert trajectory_from_row(row["trajectory"]).to_dict() == t.to_dict()
        assert row["prompt"][0]["role"] == "user" and t.proof_steps[0] in row["prompt"][0]["content"]
        assert "Reference solution" not in row["prompt"][0]["content"]  # with_reference: false by default
    summary = json.loads((d / "out" / "summary.json").read_text())
    assert summary["rows"] == 34 and summary["variant"] == "pos_aug"


def test_pipeline_without_a_model(tmp_path):
    """synthetic -> ingest -> held-out split -> extra annotations -> GRPO variant, leak-free by problem."""
    from data_pipeline import ingest, splits

    write_jsonl(tmp_path / "syn.jsonl", generate_synthetic(300, seed=0))
    ingest.run(ingest.IngestConfig(input=str(tmp_path / "syn.jsonl"), out=str(tmp_path / "base"), progress=False))
    sp = splits.run(splits.SplitConfig(input=str(tmp_path / "base"), out=str(tmp_path / "split")))
    assert len(sp.held_out) == 94
    write_jsonl(tmp_path / "extra.jsonl", generate_synthetic(40, seed=1, id_prefix="cand", valid_fraction=0.2))
    cfg = GrpoDataConfig(variant="extra_ann", base=str(tmp_path / "split" / "train.jsonl"),
                         extra=str(tmp_path / "extra.jsonl"), held_out=str(tmp_path / "split" / "held_out.jsonl"))
    trajs, counts = variant_trajectories(cfg)
    assert counts["by_origin"] == {"base": 206, "extra": 40}
    assert not {t.problem_id for t in trajs} & {t.problem_id for t in sp.held_out}
