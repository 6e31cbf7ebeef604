"""bench/bench_learning.py statistics: per-record counts from a run's predictions and the Meta Balanced F1
difference of two arms with a bootstrap over problems and seeds (issue 16, item 3). The full benchmark
trains models (`make bench-learning`); these check the numbers it prints from known predictions."""

from __future__ import annotations

from verifier.errors import InputError

import importlib.util
import sys
from pathlib import Path

import pytest

from bench.common import key_values
from eval.record_rows import localisation_rows, pooled_metrics, record_counts
from training.diagnostics import read_accuracy
from verifier.io import write_if_changed

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_learning", REPO / "bench" / "bench_learning.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_learning"] = mod
    spec.loader.exec_module(mod)
    return mod


def _gold():
    from data_pipeline.synthetic import generate_synthetic

    return generate_synthetic(40, seed=3, min_steps=3, max_steps=3, recoverable_rate=0.0,
                              fatal_kinds=["wrong_operand", "wrong_final"])


def _meta_f1_delta(gold, a, b, n, paired=False):
    """meta - rough style difference in Meta BF1 (``eval.metrics.metric_deltas``, the bench's interval)."""
    from eval.metrics import metric_deltas
    from eval.stats import BootstrapSpec

    return metric_deltas(a, b, [t.problem_id for t in gold], BootstrapSpec(n=n, seed=0), paired)["meta.balanced_f1"]


def _ratio_delta(gold, a, b, n, paired=False):
    from eval.metrics import ratio_delta
    from eval.stats import BootstrapSpec

    return ratio_delta(a, b, [t.problem_id for t in gold], BootstrapSpec(n=n, seed=0), paired)


def _preds(tmp_path, gold, name, step_right: bool):
    """Predictions with the right polarity everywhere; the first error step right or one step too far."""
    from verifier.io import write_jsonl

    rows = []
    for t in gold:
        ann = t.annotation
        if ann.is_valid:
            rows.append({"id": t.id, "verdict": "valid", "first_error_step": -1, "meta_grade": "EXACT_MATCH"})
        else:
            step = ann.first_fatal_error_step if step_right else ann.first_fatal_error_step + 5
            rows.append({"id": t.id, "verdict": "invalid", "first_error_step": step,
                         "meta_grade": "EXACT_MATCH" if step_right else "POOR_MATCH"})
    p = tmp_path / f"{name}.jsonl"
    write_jsonl(p, rows)
    return p


def test_meta_f1_difference_and_ci(bench, tmp_path):
    gold = _gold()
    good = record_counts(gold, _preds(tmp_path, gold, "good", True))
    poor = record_counts(gold, _preds(tmp_path, gold, "poor", False))
    # same polarity: Rough identical; the poor arm locates no error: Meta TNR 0, Meta BF1 0
    d, lo, hi = _meta_f1_delta(gold, [good, good, good], [poor, poor, poor], n=200)
    assert d == pytest.approx(1.0) and lo == pytest.approx(1.0) and hi == pytest.approx(1.0)
    d, lo, hi = _meta_f1_delta(gold, [good, poor], [good, poor], n=300)
    assert d == pytest.approx(0.0) and lo < 0 < hi  # the seed resampling widens the CI of identical arms
    pooled = pooled_metrics(gold, [good, poor], None)
    assert pooled["rough.balanced_f1"]["value"] == pytest.approx(1.0)
    assert pooled["meta.tnr"]["value"] == pytest.approx(0.5)


def test_record_counts_names_a_missing_prediction(bench, tmp_path):
    gold = _gold()
    p = _preds(tmp_path, gold[1:], "short", True)
    with pytest.raises(InputError, match=gold[0].id):
        record_counts(gold, p)


def test_first_error_step_accuracy_among_rejected_invalid_proofs(bench, tmp_path):
    gold = _gold()
    good = localisation_rows(gold, _preds(tmp_path, gold, "good", True))
    poor = localisation_rows(gold, _preds(tmp_path, gold, "poor", False))
    n_invalid = sum(not t.annotation.is_valid for t in gold)
    assert good[:, 0].sum() == poor[:, 0].sum() == n_invalid  # every invalid proof rejected by both
    assert good[:, 1].sum() == n_invalid and poor[:, 1].sum() == 0
    d, lo, hi = _ratio_delta(gold, [good] * 5, [poor] * 5, n=200)
    assert d == pytest.approx(1.0) and lo == pytest.approx(1.0)
    d, lo, hi = _ratio_delta(gold, [good, poor], [poor, good], n=300)
    assert d == pytest.approx(0.0) and lo < 0 < hi


def test_run_data_passes_the_heldout_check_and_keeps_every_record(bench, tmp_path):
    """The bench's GRPO/eval runs take all of OUT/held_out.jsonl; the held-out check of training/ladder.py
    (run before any work) accepts that data (it rejected the former n_eval=0 'no cap' and stopped the bench)."""
    from training import ladder
    from training.config import GRPORunConfig
    from training.data import load_trajectories_for
    from verifier.io import write_jsonl

    gold = _gold()
    write_jsonl(tmp_path / "grpo_train.jsonl", gold[:30])
    write_jsonl(tmp_path / "held_out.jsonl", gold[30:])
    data = bench.run_data_config(tmp_path)
    ladder.check_heldout(GRPORunConfig(experiment_name="base", train=False, data=data))
    train, held = load_trajectories_for(data)
    assert [t.id for t in train] == [t.id for t in gold[:30]] and [t.id for t in held] == [t.id for t in gold[30:]]


def test_a_finished_stage_is_reused_only_with_the_same_settings(bench, tmp_path):
    """Resume (bench_learning.done_stage / mark_done): a stage's marker holds the settings it finished with; the
    same settings resume it, other settings are an error naming the keys, resume=false refuses to reuse it."""
    marker = tmp_path / "rough_rl" / "seed0" / "bench_done.json"
    marker.parent.mkdir(parents=True)
    settings = {"lr": 3e-5, "steps": 32, "data": {"n": 256}}
    assert not bench.done_stage(marker, settings, resume=True)  # nothing finished yet: run it
    bench.mark_done(marker, settings)
    assert bench.done_stage(marker, settings, resume=True)
    with pytest.raises(InputError, match="lr differ"):
        bench.done_stage(marker, {**settings, "lr": 1e-4}, resume=True)
    with pytest.raises(InputError, match="resume=false"):
        bench.done_stage(marker, settings, resume=False)


def test_write_if_changed_keeps_an_identical_file(bench, tmp_path):
    """A parallel worker rewriting the shared data files leaves an identical file untouched (a reader of it is safe)."""
    import os

    p = tmp_path / "held_out.jsonl"
    write_if_changed(p, [{"id": "a"}])
    t = os.stat(p).st_mtime_ns
    write_if_changed(p, [{"id": "a"}])
    assert os.stat(p).st_mtime_ns == t and not list(tmp_path.glob("*.tmp"))
    write_if_changed(p, [{"id": "b"}])
    assert '"b"' in p.read_text()


def test_every_metric_difference_has_a_ci(bench, tmp_path):
    """meta - rough for each of Rough / Meta TPR, TNR, BF1 (issue 23 item 4): same polarity, so every Rough
    difference is 0; the arm that names the right step wins Meta TNR and BF1 by 1; valid proofs are alike (TPR 0)."""
    gold = _gold()
    good = record_counts(gold, _preds(tmp_path, gold, "good", True))
    poor = record_counts(gold, _preds(tmp_path, gold, "poor", False))
    from eval.metrics import metric_deltas
    from eval.stats import BootstrapSpec

    d = metric_deltas([good, good], [poor, poor], [t.problem_id for t in gold], BootstrapSpec(n=200, seed=0))
    assert set(d) == {f"{lv}.{m}" for lv in ("rough", "meta") for m in ("tpr", "tnr", "balanced_f1")}
    for k in ("rough.tpr", "rough.tnr", "rough.balanced_f1", "meta.tpr"):
        assert d[k] == pytest.approx((0.0, 0.0, 0.0)), k
    assert d["meta.tnr"] == pytest.approx((1.0, 1.0, 1.0)) and d["meta.balanced_f1"][0] == pytest.approx(1.0)


def test_a_failing_worker_stops_the_bench_naming_its_seeds(bench, tmp_path):
    """workers=N: each group of seeds runs in its own process of the bench (report=false); one that fails
    (here: an option the bench does not know) stops the bench with its seeds and log named."""
    with pytest.raises(SystemExit, match=r"worker failed: seeds \[0\] rough_rl/meta_ver_rl \(exit 2\); "
                                         r"seeds \[1\] rough_rl/meta_ver_rl \(exit 2\); seeds \[2\]"):
        bench.seed_workers(["no_such_option=1", "seeds=9", "workers=5"], [0, 1, 2], 3, tmp_path)
    log = (tmp_path / "worker0.log").read_text()
    assert "unknown option 'no_such_option'" in log


def test_paired_seeds_keep_seed_k_of_both_arms_together(bench, tmp_path):
    """Seed k of both arms shares its sampling seed and prompts (issue 23 item 4): with ``paired`` the bootstrap
    draws the same seed indices for both arms. Arms that differ only by which seed is good: independent draws
    give a CI around 0; paired draws see that every seed pair is identical (CI exactly 0); a constant gain of one
    arm in every pair stays above 0 whatever the seed-to-seed spread."""
    gold = _gold()
    good = record_counts(gold, _preds(tmp_path, gold, "good", True))
    poor = record_counts(gold, _preds(tmp_path, gold, "poor", False))
    d, lo, hi = _meta_f1_delta(gold, [good, poor, good], [good, poor, good], n=300)
    assert d == 0 and lo < 0 < hi  # unpaired: seed resampling per arm
    assert _meta_f1_delta(gold, [good, poor, good], [good, poor, good], n=300,
                          paired=True) == pytest.approx((0.0, 0.0, 0.0))
    ld, llo, _ = _ratio_delta(gold, *[[localisation_rows(gold, _preds(tmp_path, gold, n, r))
                                       for n, r in (("a", True), ("b", False), ("c", True))]] * 2,
                              n=300, paired=True)
    assert (ld, llo) == (0.0, 0.0)
    from eval.stats import BootstrapInputError

    with pytest.raises(BootstrapInputError, match="same seeds"):
        _meta_f1_delta(gold, [good, poor], [good], n=10, paired=True)


def test_suite_last_line_takes_rewards_from_item_3_and_the_comparison_from_item_4(bench):
    """`make bench-learning` (suite=true) prints one line: the polarity part's meta arm before / after / CI low,
    the localisation part's meta - rough (issue 23 done-when)."""
    pol = {"rows": [{"reward": [0.69, 0.6, 0.7]}, {}, {"reward": [0.71, 0.6, 0.8], "delta_vs_sft": [0.02, 0.005, 0.03]}],
           "meta_vs_rough_meta_bf1": [-0.5, -0.9, 0.1], "meta_vs_rough_loc_acc": [-0.5, 0, 0]}
    loc = {"rows": [{"reward": [0.1]}, {}, {"reward": [0.2], "delta_vs_sft": [0.1, -0.3]}],
           "meta_vs_rough_meta_bf1": [0.05, 0.01, 0.09], "meta_vs_rough_loc_acc": [0.12, 0.05, 0.2]}
    assert key_values(bench.line_values(pol, loc)) == ("reward_before=0.6900 reward_after=0.7100 delta_ci_low=0.0050 "
                                         "meta_vs_rough_meta_f1=0.0500 meta_vs_rough_ci_low=0.0100 "
                                         "loc_acc_meta_vs_rough=0.1200")


def test_suite_commands_split_the_options_between_the_two_parts(bench, tmp_path):
    """suite=true: the polarity part takes the options given; the localisation part takes LOCALISATION, its own
    ``localisation.*`` options and the shared ones, and continues the polarity warm start; a bad option stops the
    suite before any work."""
    pol, loc = bench.suite_commands(["suite=true", "seed=2", "grpo_steps=8", "localisation.seeds=0,1",
                                     f"out={tmp_path}"], tmp_path)
    assert pol == ["seed=2", "grpo_steps=8", f"out={tmp_path / 'polarity'}"]
    opts = dict(a.split("=", 1) for a in loc)
    assert opts["seeds"] == "0,1" and opts["min_steps"] == "6" and opts["seed"] == "2" and "grpo_steps" not in opts
    assert opts["sft_from"] == str(tmp_path / "polarity" / "sft" / "final")
    assert opts["exclude_problems_of"] == str(tmp_path / "polarity" / "sft_train.jsonl")
    with pytest.raises(InputError, match="unknown option 'stepz'"):
        bench.suite_commands(["localisation.stepz=3"], tmp_path)


def test_workers_share_the_runs_evenly(bench):
    """workers=2 with 5 seeds: one worker per arm, 5 runs each (a split by seed gave 6 and 4 and one idle core
    for the last sixth of the bench); an odd number of workers splits by seed; a bad arms= stops the bench."""
    assert bench.worker_groups([0, 1, 2, 3, 4], 2) == [([0, 1, 2, 3, 4], ("rough_rl",)),
                                                       ([0, 1, 2, 3, 4], ("meta_ver_rl",))]
    g4 = bench.worker_groups([0, 1, 2, 3, 4], 4)
    assert sorted((s, a) for seeds, arms in g4 for s in seeds for a in arms) == sorted(
        (s, a) for s in range(5) for a in bench.ARMS)
    assert bench.worker_groups([0, 1, 2], 3) == [([0], bench.ARMS), ([1], bench.ARMS), ([2], bench.ARMS)]
    with pytest.raises(InputError, match="arms=meta_ver_rl"):
        bench.main(["arms=meta_ver_rl"])  # the report needs both arms
    with pytest.raises(InputError, match="arms=: "):
        bench.main(["arms="])  # no arm (the warm start alone, bench/diagnose_copy.sh) writes no report
    with pytest.raises(InputError, match="arms=rough,meta"):
        bench.main(["arms=rough,meta", "report=false"])


@pytest.mark.parametrize("style", ["check", "copy_check"])
def test_read_accuracy_tells_reading_from_the_start_equals_previous_shortcut(bench, tmp_path, style):
    """Item 4's diagnosis: gold texts read every step (fatal_start 1); texts that write the previous result as
    every start (the shortcut a tiny model learns) read no fatal step (fatal_shortcut 1)."""
    import re

    from data_pipeline.synthetic import generate_synthetic, gold_verification
    from verifier.io import write_jsonl

    gold = generate_synthetic(
        60, seed=4, min_steps=6, max_steps=8, recoverable_rate=0.0, fatal_kinds=["wrong_operand"],
        subjects=["arithmetic"])

    def shortcut(text: str) -> str:  # "Step i: ... <start> vs <prev>" -> "<prev> vs <prev>"
        return re.sub(r"(\S+) vs (\S+),", r"\2 vs \2,", text)

    for name, fn, want in (("gold", lambda x: x, (1.0, 0.0)), ("shortcut", shortcut, (0.0, 1.0))):
        p = tmp_path / f"{name}.jsonl"
        write_jsonl(p, ({"id": t.id, "passes": [{"text": fn(gold_verification(t, style))}]} for t in gold))
        r = read_accuracy(gold, p)
        n_fatal = sum(not t.annotation.is_valid and t.annotation.first_fatal_error_step >= 1 for t in gold)
        assert r["fatal_lines"] == n_fatal > 0
        assert (r["fatal_start"], r["fatal_shortcut"]) == want
        if name == "gold":
            assert set(r["start_by_step"].values()) == {1.0}
    stray = tmp_path / "stray.jsonl"
    write_jsonl(stray, [{"id": "nope", "passes": []}])
    with pytest.raises(InputError, match="'nope'"):
        read_accuracy(gold, stray)


def test_the_sft_data_mix_changes_only_the_sft_data(bench):
    """sft_valid_fraction / sft_fatal_kinds (item 4's diagnosis) reach the SFT data alone, and by default add
    nothing to the SFT stage's settings (a stage finished before the options still resumes)."""
    from data_pipeline.synthetic import generate_synthetic
    from data_pipeline.synthetic_recipes import sft_data_mix, verification_task

    assert sft_data_mix(bench.BenchConfig()) == {}
    cfg = bench._overrides(["sft_valid_fraction=0.2", "sft_fatal_kinds=wrong_operand", "min_steps=6",
                            "max_steps=8"], bench.BenchConfig())
    mix = sft_data_mix(cfg)
    assert mix == {"valid_fraction": 0.2, "fatal_kinds": ["wrong_operand"]}
    sft = generate_synthetic(400, seed=3, **{**verification_task(cfg), **mix})
    task = generate_synthetic(400, seed=3, **verification_task(cfg))
    assert 0.12 < sum(t.annotation.is_valid for t in sft) / len(sft) < 0.28
    assert {t.meta["synthetic"].get("fatal_kind") for t in sft if not t.annotation.is_valid} == {"wrong_operand"}
    assert 0.4 < sum(t.annotation.is_valid for t in task) / len(task) < 0.6
    assert {t.meta["synthetic"].get("fatal_kind") for t in task if not t.annotation.is_valid} == {
        "wrong_operand", "wrong_final"}
    with pytest.raises(InputError, match="sft_valid_fraction"):
        bench._overrides(["sft_valid_fraction=1.5"], bench.BenchConfig())
