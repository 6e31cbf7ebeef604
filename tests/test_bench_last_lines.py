"""Every bench's last line is a contract (``key=value`` pairs that the Makefile, CI and reports read): its keys,
their order and their number formats stay exactly as they were. Each bench's last-line function runs here on
fixed inputs and must give the string the bench printed before its last line moved to ``bench/common.py``."""

from __future__ import annotations

from verifier.errors import InputError

import math

from bench.common import key_values

NAN = float("nan")


def test_bench_learning_last_line():
    from bench.bench_learning import line_values

    def last_line(pol, loc):
        return key_values(line_values(pol, loc))

    pol = {"rows": [{"reward": [0.41234]}, {}, {"reward": [0.55555], "delta_vs_sft": [0.14, 0.01999, 0.3]}]}
    loc = {"meta_vs_rough_meta_bf1": [0.0312, None, 0.07], "meta_vs_rough_loc_acc": [-0.02]}
    assert last_line(pol, loc) == ("reward_before=0.4123 reward_after=0.5555 delta_ci_low=0.0200 "
                                   "meta_vs_rough_meta_f1=0.0312 meta_vs_rough_ci_low=nan loc_acc_meta_vs_rough=-0.0200")
    loc["meta_vs_rough_meta_bf1"][1] = -0.00444
    assert "meta_vs_rough_ci_low=-0.0044 " in last_line(pol, loc)


def test_ladder_report_last_line():
    from eval.ladder_report import line_values as last_line

    names = ["meta_vs_rough", "extra_ann_tnr", "pos_aug_tpr", "pess_tnr", "final_vs_base", "selection_vs_random"]
    tests = {n: {"delta": 0.01 * (i + 1), "ci": [None if i == 2 else -0.001 * i, 0.5]} for i, n in enumerate(names)}
    doc = {"tests": tests, "false_accept": {"base_per_pass": 0.25, "final_8pass": 0.03125}}
    assert key_values(last_line(doc)) == (
        "meta_vs_rough_meta_f1=0.0100 meta_vs_rough_ci_low=-0.0000 extra_ann_meta_tnr_delta=0.0200 "
        "extra_ann_ci_low=-0.0010 pos_aug_tpr_delta=0.0300 pos_aug_ci_low=nan "
        "pess_tnr_delta=0.0400 pess_ci_low=-0.0030 final_vs_base_meta_f1=0.0500 "
        "final_vs_base_ci_low=-0.0040 selection_vs_random_meta_f1=0.0600 "
        "selection_vs_random_ci_low=-0.0050 false_accept_base=0.2500 false_accept_final=0.0312")


def test_bench_judge_last_line():
    from eval.peer_compare import LINE_FORMATS, line_values

    def last_line(med, vs_peer, agreement):
        return key_values(line_values(med, vs_peer, agreement), formats=LINE_FORMATS)

    med = {"judge_vs_raw": 0.95, "judge_vs_naive": 6.1, "early_stop_token_saving": NAN, "two_servers_vs_one": 1.234}
    assert last_line(med, 1.7, 1.0) == ("judge_vs_raw=0.950 judge_vs_naive=6.10 early_stop_token_saving=nan "
                                        "two_servers_vs_one=1.23 vs_peer=1.70 peer_agreement=1.000")
    assert math.isnan(med["early_stop_token_saving"])


def test_bench_prover_last_line():
    from bench.bench_prover import line_values

    report = {"rows": {"before": {"true_acc": 0.25},
                       "pess8": {"true_acc": 0.3125, "accept": 0.5, "hacking_rate": 0.125, "refine_gain": None}}}
    assert key_values(line_values(report)) == (
        "true_acc_before=0.2500 true_acc_after=0.3125 accept_after=0.5000 hacking_rate=0.1250 "
        "gold_reward_true_acc_after=nan refine_gain=nan")
    report["rows"]["gold"], report["rows"]["pess8"]["refine_gain"] = {"true_acc": 0.4}, 0.06251
    assert key_values(line_values(report)).endswith(" gold_reward_true_acc_after=0.4000 refine_gain=0.0625")


def test_bench_prover_control_alone_pools_seeds_and_prints_nan_for_pess8():
    """``arms=gold`` (the positive control alone): the gold row pools its GRPO seeds, its change against the SFT
    prover resamples problems and seeds, the pess8 keys print nan; bad seeds or arms are one line."""
    import pytest

    from bench.bench_prover import _paired, _pooled, line_values
    from bench.common import ProverHackingConfig, prover_options

    cfg = prover_options(["arms=gold", "gold_seeds=0,1,2", "eval_proofs=2"], ProverHackingConfig())
    assert prover_options(["arms=pess8,pool", "pool_size=2"], ProverHackingConfig()).pool_size == 2
    for bad in (["arms=pass1"], ["arms=gold", "gold_seeds=0,0"], ["gold_seeds=a"], ["eval_proofs=0"],
                ["arms=pess8,pool", "pool_size=3"], ["arms=pess8,pool", "pool_size=1"], ["prover_sft_checkpoint=3000"],
                ["grpo_steps=many"]):
        with pytest.raises(InputError):
            prover_options(bad, ProverHackingConfig())
    before = {"per_proof": {f"p{i}/{j}": [int(i == 0), 0] for i in range(4) for j in range(2)}}
    seeds = [{"true_acc": t, "accept": 0.0, "hacking_rate": 0.0, "accept_refined": 0.0, "true_acc_refined": t,
              "refine_gain": None, "refine_true_gain": 0.0, "n": 8, "train": {},
              "per_proof": {f"p{i}/{j}": [int(i < k), 0] for i in range(4) for j in range(2)}}
             for t, k in ((0.25, 1), (0.5, 2), (0.75, 3))]
    row = _pooled(seeds)
    assert row["true_acc"] == 0.5 and row["seeds"] == 3 and row["refine_gain"] is None
    d = _paired(before, seeds, cfg)
    assert (d["n"], d["problems"], d["seeds"]) == (8, 4, 3)
    assert abs(d["true_acc"]["delta"] - 0.25) < 1e-9 and d["true_acc"]["ci"][0] <= 0.25 <= d["true_acc"]["ci"][1]
    line = key_values(line_values({"rows": {"before": {"true_acc": 0.25}, "gold": row}}))
    assert line == ("true_acc_before=0.2500 true_acc_after=nan accept_after=nan hacking_rate=nan "
                    "gold_reward_true_acc_after=0.5000 refine_gain=nan")


def test_diagnose_control_options_and_last_line():
    """``make diagnose-control``: its own options are checked in one line; the last line names the chosen warm start
    and learning rate and that run's dev true rate before and after, with the gain's lower CI bound."""
    import pytest

    from bench.diagnose_control import LINE_FORMATS, line_values, parse

    cfg, own = parse(["lrs=3e-5,1e-4", "grpo_batch=128"])
    assert cfg.grpo_batch == 128 and own["lrs"] == "3e-5,1e-4" and cfg.out == "runs/diagnose_control"
    cfg, own = parse(["recipe=loop", "prover_sft_steps=1200", "every=200", "from_step=200", "warm=best,1200"])
    assert own["recipe"] == "loop" and own["warm"] == "best,1200" and own["train_rounds"] == "0"
    assert parse(["recipe=loop", "train_rounds=0,3,4"])[1]["train_rounds"] == "0,3,4"
    for bad in (["every=x"], ["lrs=fast"], ["from_step=0"], ["n_problems=4"], ["nope=1"], ["recipe=mine"],
                ["warm=1000"], ["warm=best,300"], ["warm=600"], ["warm=first"], ["train_rounds=0,1"],
                ["train_rounds=3,3"], ["train_rounds=x"]):
        with pytest.raises(InputError):
            parse(bad)
    doc = {"sft": [{"step": 800, "dev_true": 0.039}, {"step": 1200, "dev_true": 0.4349}],
           "lrs": [{"lr": 1e-4, "dev_true_after": 0.47, "dev_gain": 0.036, "ci": [-0.026, 0.104]},
                   {"lr": 3e-5, "dev_true_after": 0.5104, "dev_gain": 0.0755, "ci": [0.0312, 0.13]}],
           "chosen": {"sft_steps": 1200, "lr": 3e-5}, "seconds": 313}
    assert key_values(line_values(doc), formats=LINE_FORMATS) == (
        "control_sft_steps=1200 control_lr=3e-05 dev_true_before=0.4349 dev_true_after=0.5104 dev_gain=0.0755 "
        "dev_gain_ci_low=0.0312 seconds=313")


def test_the_inline_last_lines_keep_their_formats():
    """bench_reward, bench_select, bench_train and bench_nemo_reward build their line in place: the same values and
    formats as there give the strings their former f-strings gave."""
    from bench.common import last_line

    assert key_values({"reward_speedup_vs_sequential": 3.0 / 1.3}, ".2f") == "reward_speedup_vs_sequential=2.31"
    assert (key_values({"verdict_rows": 12345, "seconds": 0.98765}, ".3f", {"verdict_rows": "d"})
            == "verdict_rows=12345 seconds=0.988")
    assert (key_values({"colocate_vs_hf": 1.456, "zero3_steps": str(3), "ranks": 2}, ".2f", {"ranks": "d"})
            == "colocate_vs_hf=1.46 zero3_steps=3 ranks=2")
    assert (key_values({"colocate_vs_hf": 1.456, "zero3_steps": 0, "ranks": 0}, ".2f",
                       {"zero3_steps": "d", "ranks": "d"}) == "colocate_vs_hf=1.46 zero3_steps=0 ranks=0")
    assert (last_line({"reward_vs_nemo": 0.995, "reward_agreement": 0.8125}, ".2f", {"reward_agreement": ".3f"})
            == "reward_vs_nemo=0.99 reward_agreement=0.812")


def test_every_bench_prints_its_last_line_through_bench_common():
    """No bench formats its own last line or repeats the preamble: the ``key=value`` writer and the environment
    defaults live in bench/common.py."""
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "bench"
    for name in ("bench_judge", "bench_ladder", "bench_learning", "bench_nemo_reward", "bench_prover", "bench_reward",
                 "bench_select", "bench_train", "diagnose_prover", "diagnose_control", "step_rule"):
        text = (bench / f"{name}.py").read_text()
        assert "from bench.common import" in text, name
        assert 'os.environ.setdefault("OMP_NUM_THREADS"' not in text, name
        assert "def free_port" not in text and "def _free_port" not in text, name


def test_step_rule_and_diagnose_prover_end_with_a_key_value_line():
    from bench.diagnose_prover import LINE_FORMATS, line_values as diagnosis_values
    from bench.step_rule import RULES, line_values as step_rule_values

    result = {"meta_vs_rough": {r: {"meta.tnr": (0.0, 0.0, 0.0), "meta.balanced_f1": (0.01 * i, -0.02, 0.05)}
                                for i, r in enumerate(RULES)}}
    result["meta_vs_rough"]["per_pass"]["step_acc"] = (0.125, None, 0.3)
    assert key_values(step_rule_values(result)) == (
        "per_pass_meta_f1_delta=0.0000 per_pass_meta_f1_ci_low=-0.0200 earliest_meta_f1_delta=0.0100 "
        "earliest_meta_f1_ci_low=-0.0200 most_named_meta_f1_delta=0.0200 most_named_meta_f1_ci_low=-0.0200 "
        "step_acc_delta=0.1250 step_acc_ci_low=nan")
    doc = {"prover_sft": [{"step": 100, "true_acc": 0.1}, {"step": 200, "true_acc": 0.40625}],
           "prover_temperature": [{"mixed_groups": 3}, {"mixed_groups": 7}, {"mixed_groups": 5}],
           "verifier_sft": [{"gold": {"parsed": 0.5, "valid": 0.2}, "wrong_result": {"valid": 0.1}},
                            {"gold": {"parsed": 0.96875, "valid": 0.9}, "wrong_result": {"valid": 0.75}}],
           "seconds": 412}
    assert key_values(diagnosis_values(doc), formats=LINE_FORMATS) == (
        "prover_true_acc=0.4062 mixed_groups_best=7 verifier_parsed=0.9688 verifier_accepts_wrong=0.7500 seconds=412")


def test_diagnose_control_loop_recipe_reads_no_held_out_problem():
    """``recipe=loop``: GRPO on the problems of ``train_rounds``, dev on rounds 1 and 2's, none of them among the
    loop's held-out problems or its prover's SFT problems (bench-loop's sizes, the same seed)."""
    from bench.common import ProverHackingConfig
    from bench.diagnose_control import problems
    from training.loop import LoopConfig, problem_sets

    cfg = ProverHackingConfig(seed=3, n_prover_sft=200)
    sft, train, dev, rows = problems(cfg, "loop", 48, "0,3")
    sets = problem_sets(LoopConfig(seed=3, n_prover_sft=200, n_heldout=200, n_round_problems=64), rounds=3)
    text = lambda ps: {p.problem for p in ps}  # noqa: E731
    assert text(train) == text(sets["round 0"]) | text(sets["round 3"]) and len(train) == 128
    assert text(dev) == text(sets["round 1"]) | text(sets["round 2"])
    assert not text(train + dev) & (text(sets["held-out"]) | text(sft))
    assert len(rows(sft)) == len(sft) and rows(sft)[0]["completion"][0]["role"] == "assistant"
