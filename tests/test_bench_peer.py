"""eval/peer_compare.py: make bench-judge's peer comparison (f) against inspect-ai, from constructed completions.

The peer itself runs in .venv-peer (bench/peer_inspect.py, make peer-deps); these tests need neither it nor a server:
the peer's completions are decided by our parser and our 8-pass pessimism, the agreement counts what it says, and
the last line keeps the four existing keys in their order with vs_peer and peer_agreement appended."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path

import pytest

from bench.common import key_values
from verifier.parser import format_verification
from verifier.records import Verdict

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pc():
    spec = importlib.util.spec_from_file_location("peer_compare", REPO / "eval" / "peer_compare.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["peer_compare"] = mod
    spec.loader.exec_module(mod)
    return mod


VALID = format_verification("valid", -1, "ok")
INVALID = format_verification("invalid", 2, "step 2 is wrong")


def rows(pid: str, texts: list[str], reasons: list[str] | None = None, errors: list[str | None] | None = None):
    # shuffled epochs: the decision does not depend on the order rows come back in
    out = [{"id": pid, "epoch": e + 1, "text": t, "finish_reason": (reasons or ["stop"] * len(texts))[e],
            "error": (errors or [None] * len(texts))[e]} for e, t in enumerate(texts)]
    return out[::-1]


def test_peer_decisions_by_our_parser_and_pessimism(pc):
    got = pc.peer_decisions(
        rows("all-valid", [VALID] * 8)
        + rows("one-invalid", [VALID] * 7 + [INVALID])
        + rows("one-garbage", [VALID] * 7 + ["no answer block"])
        + rows("cut", [VALID] * 8, reasons=["stop"] * 7 + ["max_tokens"])  # inspect's budget cut = truncated
        + rows("short", [VALID] * 7)  # fewer than n completions: undecided
        + rows("failed", [VALID] * 8, errors=[None] * 7 + ["connection refused"]),
        n_steps={"all-valid": 3, "one-invalid": 3, "one-garbage": 3, "cut": 3, "short": 3, "failed": 3}, n=8)
    assert got == {"all-valid": Verdict.VALID, "one-invalid": Verdict.INVALID, "one-garbage": Verdict.INVALID,
                   "cut": Verdict.INVALID, "short": None, "failed": None}


def test_agreement(pc):
    ours = {"a": Verdict.VALID, "b": Verdict.INVALID, "c": Verdict.INVALID, "d": None}
    peer = {"a": Verdict.VALID, "b": Verdict.VALID, "c": Verdict.INVALID, "d": None}
    # a, c agree; b differs; d undecided on our side (a failed judgment) is no agreement
    assert pc.agreement(ours, peer) == 0.5
    assert pc.agreement({"a": Verdict.VALID}, {}) == 0.0  # the peer missed the proof
    assert pc.agreement(ours, ours) == 0.75
    assert math.isnan(pc.agreement({}, peer))


def test_pass_text_agreement(pc):
    texts = {"p": ["x", "y", "z"], "q": ["u"]}
    assert pc.pass_text_agreement(texts, rows("p", ["x", "y", "Z"]) + rows("q", ["u"])) == 0.75
    assert pc.pass_text_agreement(texts, rows("p", ["x"])) == 0.25


def test_last_line_keeps_keys_and_order(pc):
    med = {"judge_vs_raw": 0.9512, "judge_vs_naive": 6.123, "early_stop_token_saving": 0.41234,
           "two_servers_vs_one": 1.234}
    line = key_values(pc.line_values(med, 1.6789, 15 / 16), formats=pc.LINE_FORMATS)
    assert line == ("judge_vs_raw=0.951 judge_vs_naive=6.12 early_stop_token_saving=0.412 two_servers_vs_one=1.23 "
                    "vs_peer=1.68 peer_agreement=0.938")
    keys = [kv.split("=")[0] for kv in line.split()]
    assert keys == ["judge_vs_raw", "judge_vs_naive", "early_stop_token_saving", "two_servers_vs_one", "vs_peer",
                    "peer_agreement"]
    assert all(re.fullmatch(r"[a-z_]+=\d+\.\d+", kv) for kv in line.split())
    # no peer venv: the keys are still there, as nan
    assert key_values(pc.line_values(med, math.nan, math.nan), formats=pc.LINE_FORMATS).endswith(" vs_peer=nan peer_agreement=nan")


def test_make_bench_judge_installs_the_peer_apart():
    """inspect-ai goes into its own virtualenv (make peer-deps), never into .venv; bench-judge depends on it."""
    make = (REPO / "Makefile").read_text()
    assert re.search(r"^bench-judge:.*\bpeer-deps\b", make, re.M)
    assert re.search(r"^\$\(PEER_VENV\)/\.installed:\n(\t.*\n)*\t\$\(PEER_VENV\)/bin/python -m pip install .*inspect-ai", make,
                     re.M)
    assert ".venv-peer/" in (REPO / ".gitignore").read_text()
