"""Every bench's last line is a contract (``key=value`` pairs that the Makefile, CI and reports read): its keys,
their order and their number formats stay exactly as they were. Each bench's last-line function runs here on
fixed inputs and must give the string the bench printed before its last line moved to ``bench/common.py``."""

from __future__ import annotations

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
    from bench.ladder_report import line_values as last_line

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
    from bench.peer_compare import LINE_FORMATS, line_values

    def last_line(med, vs_peer, agreement):
        return key_values(line_values(med, vs_peer, agreement), formats=LINE_FORMATS)

    med = {"judge_vs_raw": 0.95, "judge_vs_naive": 6.1, "early_stop_token_saving": NAN, "two_servers_vs_one": 1.234}
    assert last_line(med, 1.7, 1.0) == ("judge_vs_raw=0.950 judge_vs_naive=6.10 early_stop_token_saving=nan "
                                        "two_servers_vs_one=1.23 vs_peer=1.70 peer_agreement=1.000")
    assert math.isnan(med["early_stop_token_saving"])
