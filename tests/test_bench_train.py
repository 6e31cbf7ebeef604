"""`make bench-train`'s colocate_vs_hf: interleaved repeats and their median, with a fake timing (no training)."""

import importlib
import statistics
from pathlib import Path

import pytest

from verifier.errors import InputError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bt():
    return importlib.import_module("bench.bench_train")


def fake_runs(base: dict[str, float], drift: float):
    """A timing function whose step time grows by ``drift`` per call (the machine's load rising), and the calls."""
    calls: list[tuple[str, int]] = []

    def run_arm(arm: str, repeat: int) -> dict:
        calls.append((arm, repeat))
        return {"phases": {"phase/step_s": {"mean": base[arm] + drift * (len(calls) - 1)}}}

    return run_arm, calls


def test_arms_interleave_with_alternating_order_and_the_median_is_reported(bt):
    hf, colo = bt.ARMS
    run_arm, calls = fake_runs({hf: 4.0, colo: 2.0}, drift=0.5)
    res = bt.interleaved(run_arm, 3)
    assert calls == [(hf, 0), (colo, 0), (colo, 1), (hf, 1), (hf, 2), (colo, 2)] == res["order"]
    # step times by call: hf 4.0, colo 2.5, colo 3.0, hf 5.5, hf 6.0, colo 4.5
    assert res["ratios"] == pytest.approx([4.0 / 2.5, 5.5 / 3.0, 6.0 / 4.5])
    assert res["median"] == pytest.approx(statistics.median(res["ratios"])) == pytest.approx(4.0 / 2.5)
    assert res["min"] == pytest.approx(6.0 / 4.5) and res["max"] == pytest.approx(5.5 / 3.0)
    assert [len(res["runs"][a]) for a in bt.ARMS] == [3, 3]


def test_one_slow_repeat_moves_the_median_less_than_the_mean(bt):
    hf, colo = bt.ARMS
    slow = iter([4.0, 2.0, 2.0, 4.0, 4.0, 8.0])  # the third colocate run hit a loaded machine
    res = bt.interleaved(lambda arm, r: next(slow), 3, step_s=lambda x: x)
    assert res["ratios"] == pytest.approx([2.0, 2.0, 0.5])
    assert res["median"] == pytest.approx(2.0) and res["min"] == pytest.approx(0.5)


def test_even_repeats_average_the_middle_two_and_one_repeat_is_that_run(bt):
    times = iter([3.0, 1.0, 1.0, 2.0])  # repeat 1: 3/1, repeat 2 (colocate first): 2/1
    assert bt.interleaved(lambda arm, r: next(times), 2, step_s=lambda x: x)["median"] == pytest.approx(2.5)
    res = bt.interleaved(lambda arm, r: 2.0 if arm == bt.ARMS[0] else 1.0, 1, step_s=lambda x: x)
    assert res["ratios"] == [2.0] and res["median"] == res["min"] == res["max"] == 2.0
    with pytest.raises(ValueError, match="repeats"):
        bt.interleaved(lambda arm, r: 1.0, 0, step_s=lambda x: x)


def test_options_repeats_and_the_sync_check_default(bt):
    assert bt.SYNC_CHECK == "raise"  # the colocate arm is timed with the probe check on (the default)
    with pytest.raises(InputError, match="repeats >= 1"):
        bt.main(["repeats=0"])
    with pytest.raises(InputError, match="repeats"):
        bt.main(["repeat=3"])  # unknown; the message lists the options
    assert "colocate_vs_hf_repeats=<n>" in bt.__doc__


def test_the_markdown_section_lists_each_repeat_and_the_median(bt):
    hf, colo = bt.ARMS
    run_arm, _ = fake_runs({hf: 4.0, colo: 2.0}, drift=0.5)
    md = "\n".join(bt._ratio_lines(256, bt.interleaved(run_arm, 3)))
    assert "| 2 | vLLM colocate then HF generate | 5.500 | 3.000 | 1.83 |" in md
    assert "colocate_vs_hf median 1.60 (min 1.33, max 1.83, 3 repeats)" in md
