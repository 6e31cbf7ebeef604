"""Reports: Markdown + PNG plots from metrics.json, and the Table-3-style ablation over runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eval.metrics import PassResult, Prediction, ScoreOptions, score_predictions
from eval.report import ReportConfig, ablation_table, find_runs, run
from eval.score import flatten
from eval.stats import BootstrapSpec
from verifier.config import compose
from verifier.results import flat_metrics, plot_tpr_tnr, resolve_mode, write_metrics, write_report
from verifier.records import Annotation, MetaGrade, ProofTrajectory, Verdict

REPO = Path(__file__).resolve().parents[1]


def _gold(n=24):
    return [ProofTrajectory(f"r{i}", f"p{i // 2}", "P", ("a", "b", "c"), split="UG" if i % 3 else "QE",
                            subject="Algebra" if i % 4 else "Topology",
                            annotation=Annotation(first_fatal_error_step=-1 if i % 2 else 1)) for i in range(n)]


def _doc(accept_valid: float, reject_invalid: float, gold=None, passes=False):
    gold = gold or _gold()
    preds = {}
    for i, g in enumerate(gold):
        valid = g.annotation.is_valid
        p = accept_valid if valid else 1 - reject_invalid
        acc = (i * 0.37) % 1 < p
        ps = tuple(PassResult(k, Verdict.VALID if (acc or k < 1) else Verdict.INVALID, -1 if acc else 1)
                   for k in range(3)) if passes else ()
        preds[g.id] = Prediction(g.id, Verdict.VALID if acc else Verdict.INVALID, -1 if acc else 1,
                                 MetaGrade.EXACT_MATCH if i % 5 else MetaGrade.POOR_MATCH, ps, has_meta=True)
    return flatten(score_predictions(gold, preds, ScoreOptions(bootstrap=BootstrapSpec(n=100))))


def test_write_report_has_tables_plots_and_browser_link(tmp_path):
    doc = _doc(0.8, 0.6, passes=True)
    browser = tmp_path / "browser" / "index.html"
    browser.parent.mkdir()
    browser.write_text("<html></html>")
    path = write_report(tmp_path / "run", doc, title="Tiny", browser_index=browser)
    md = path.read_text()
    assert md.startswith("# Tiny")
    assert "[index.html](../browser/index.html)" in md
    for needle in ("`rough.balanced_f1`", "`meta.tnr`", "## By split", "| QE |", "## By subject",
                   "pairwise flip rate", "| pessimistic | 3 |", "![k-curve](k_curve.png)",
                   "![TPR vs TNR with iso-Balanced-F1 curves](tpr_tnr.png)"):
        assert needle in md, needle
    for png in ("tpr_tnr.png", "k_curve.png"):
        data = (tmp_path / "run" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    # the numbers in the report are the numbers in the document
    assert f"| `rough.tpr` | {100 * doc['rough.tpr']['value']:.1f} |" in md


def test_plot_survives_undefined_metrics(tmp_path):
    p = plot_tpr_tnr([{"label": "x", "tpr": {"value": None, "ci": None}, "tnr": {"value": 0.5, "ci": None}}],
                     tmp_path / "a.png")
    assert p.read_bytes()[:4] == b"\x89PNG"


def test_ablation_deltas_against_base(tmp_path):
    runs = {"base": _doc(0.9, 0.3), "+Meta-Ver-RL": _doc(0.8, 0.6), "+Pessimistic": _doc(0.7, 0.9)}
    for name, doc in runs.items():
        write_metrics(tmp_path / "sweep" / name, doc)
    table = ablation_table(list(runs.items()), base="base")
    for row in table["rows"]:
        for m in table["metrics"]:
            v, b = runs[row["label"]][m]["value"], runs["base"][m]["value"]
            assert row["values"][m] == pytest.approx(100 * v, abs=1e-3)
            if row["label"] == "base":
                assert row["deltas"][m] is None
            else:
                assert row["deltas"][m] == pytest.approx(100 * (v - b), abs=1e-3)
    # CLI over the sweep directory (expanded to its run subdirectories: the ladder's rows first, then by name)
    assert [d.name for d in find_runs([tmp_path / "sweep"])] == ["base", "+Meta-Ver-RL", "+Pessimistic"]
    out = tmp_path / "ablation"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-m", "eval.report", f"runs={tmp_path / 'sweep'}", f"out={out}",
                        "base=base"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == f"wrote {out / 'ablation.md'}"
    md = (out / "ablation.md").read_text()
    assert "| base (base) |" in md and "▲" in md and "▼" in md and "Meta TNR" in md
    saved = json.loads((out / "ablation.json").read_text())
    assert saved["base"] == "base" and len(saved["rows"]) == 3
    assert (out / "ablation.png").read_bytes()[:4] == b"\x89PNG"


def test_sweep_directory_is_reported_in_the_ladders_order(tmp_path, monkeypatch):
    """Issue 42 item 5: runs=[SWEEP_DIR] lists Table 3's rows in the ladder's order (base, rough_rl, meta_ver_rl,
    extra_ann, pos_aug, pess_ver), not alphabetically nor in the file system's order; other rows come after,
    by name; explicit run paths keep the order given."""
    import random

    import eval.report

    ladder = ["base", "rough_rl", "meta_ver_rl", "extra_ann", "pos_aug", "pess_ver"]
    for name in [*ladder, "zz_extra", "a_extra"]:
        write_metrics(tmp_path / "sweep" / name, _doc(0.5, 0.5))
    (tmp_path / "sweep" / "no_metrics").mkdir()
    iterdir = Path.iterdir

    def shuffled(self):
        listing = list(iterdir(self))
        random.Random(len(listing)).shuffle(listing)
        return iter(listing)

    monkeypatch.setattr(Path, "iterdir", shuffled)
    want = [*ladder, "a_extra", "zz_extra"]
    assert [d.name for d in find_runs([tmp_path / "sweep"])] == want
    table = run(compose("report", ReportConfig, [f"runs=[{tmp_path / 'sweep'}]", f"out={tmp_path / 'o'}",
                                                 "wandb.enabled=false"]))
    assert [r["label"] for r in table["rows"]] == want and table["base"] == "base"
    md = (tmp_path / "o" / "ablation.md").read_text()
    assert [md.index(f"| {n}") for n in want] == sorted(md.index(f"| {n}") for n in want)
    explicit = [tmp_path / "sweep" / n for n in ("pos_aug", "base")]
    assert find_runs(explicit) == explicit
    assert list(eval.report.LADDER_ROWS) == ladder


def test_report_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="no metrics.json"):
        run(compose("report", ReportConfig, [f"runs=[{tmp_path}]", f"out={tmp_path / 'o'}"]))
    write_metrics(tmp_path / "a", _doc(0.5, 0.5))
    with pytest.raises(ValueError, match="base row 'zzz'"):
        run(compose("report", ReportConfig, [f"runs=[{tmp_path / 'a'}]", f"out={tmp_path / 'o'}", "base=zzz"]))


def test_ablation_report_logs_to_wandb_offline(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert resolve_mode(None) == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert resolve_mode(None) == "online" and resolve_mode("offline") == "offline"
    monkeypatch.delenv("WANDB_API_KEY")
    write_metrics(tmp_path / "a", _doc(0.5, 0.5))
    write_metrics(tmp_path / "b", _doc(0.6, 0.7))
    run(compose("report", ReportConfig, [f"runs=[{tmp_path / 'a'},{tmp_path / 'b'}]", f"out={tmp_path / 'o'}",
                                          "wandb.enabled=true", "labels=[A,B]"]))
    assert list((tmp_path / "o" / "wandb").glob("offline-run-*"))
    flat = flat_metrics(_doc(0.5, 0.5))
    assert "rough.tpr.ci_lo" in flat and "breakdowns/split/QE/metrics/rough.tpr" in flat
