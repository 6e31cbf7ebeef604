"""`bench/bench_nemo_reward.py`'s accounting of the two rewards (no nemo-gym needed)."""

from bench.bench_nemo_reward import agreement


def test_agreement_counts_what_each_side_read_and_compares_only_both_read():
    """Ours reads a grade (JUDGE_FAILED / UNPARSEABLE: not read, reward None or 0); NeMo Gym reads a boxed score
    (``meta_read``; unread: r_meta 0, reward 0). Equal rewards are counted over the completions both sides read,
    so two unread answers (ours None, NeMo 0) and a format-gated one are not agreement."""
    grades = ["EXACT_MATCH", "BASIC_MATCH", "JUDGE_FAILED", "WRONG_POLARITY", "UNPARSEABLE"]
    r_ours = [1.0, 0.5, None, 0.0, 0.0]
    nemo = {"rewards": [1.0, 1.0, 0.0, 0.0, 0.0], "meta_read": [True, True, False, False, True],
            "details": [{"r_meta": 1.0}, {"r_meta": 1.0}, {"r_meta": 0.0}, {"r_meta": 0.0}, {"reason": "x"}],
            "meta_responses": ["\\boxed{1}", "\\boxed{1}", "", "no score", "\\boxed{0}"]}
    a = agreement(r_ours, grades, nemo)
    assert (a["ours_read"], a["nemo_read"], a["both_read"]) == (3, 3, 2)
    assert a["same_where_both_read"] == 0.5  # completion 0 equal, 1 not (0.5 vs 1.0)
    assert a["per_completion"][2] == {"ours": None, "nemo": 0.0, "ours_grade": "JUDGE_FAILED", "ours_detail": "",
                                      "nemo_r_meta": 0.0, "nemo_read": False, "nemo_meta": ""}
    failed = agreement(r_ours, grades, nemo, ["", "", "judge failed: unparseable no block", "", ""])
    assert failed["per_completion"][2]["ours_detail"] == "judge failed: unparseable no block"
