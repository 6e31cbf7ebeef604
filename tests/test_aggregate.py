"""Aggregation policies (section 4.4; TCS-Bench k-of-n) and the early-stop rule they share with judging."""

from __future__ import annotations

import itertools

import pytest

from verifier.aggregate import AggregationPolicy, aggregate, decided
from verifier.parser import format_verification, parse_verification
from verifier.records import Verdict

ACC = parse_verification(format_verification("valid", -1, "fine"))
REJ = {s: parse_verification(format_verification("invalid", s, f"step {s} wrong")) for s in range(4)}
BAD = parse_verification("no answer block here")
OUTCOMES = {"a": ACC, "r": REJ[2], "u": BAD}


def passes(code: str):
    return [OUTCOMES[c] for c in code]


@pytest.mark.parametrize("code,kind,k,unp,verdict", [
    ("aaaaaaaa", "pessimistic", None, "reject", "valid"),
    ("aaaaaaar", "pessimistic", None, "reject", "invalid"),
    ("aaaaaaau", "pessimistic", None, "reject", "invalid"),
    ("aaaaaaau", "pessimistic", None, "ignore", "valid"),
    ("uuuu", "pessimistic", None, "ignore", "invalid"),  # nothing parsed: never accepted
    ("aaar", "k_of_n", 3, "reject", "valid"),
    ("aarr", "k_of_n", 3, "reject", "invalid"),
    ("aaau", "k_of_n", 3, "ignore", "valid"),
    ("aaaaarrr", "majority", None, "reject", "valid"),
    ("aaaarrrr", "majority", None, "reject", "invalid"),
    ("aaaauuuu", "majority", None, "ignore", "valid"),
    ("aaaauuuu", "majority", None, "reject", "invalid"),
])
def test_policies(code, kind, k, unp, verdict):
    agg = aggregate(passes(code), AggregationPolicy(kind, n=len(code), k=k, unparseable=unp))
    assert agg.verdict.value == verdict
    assert agg.n_passes == len(code) and agg.n_unparseable == code.count("u")  # always counted
    assert agg.n_accept == code.count("a")


def test_accept_fraction_and_first_error_step():
    agg = aggregate([ACC, REJ[3], ACC, REJ[1]], AggregationPolicy(n=4))
    assert agg.accept_fraction == 0.5 and agg.first_error_step == 1  # earliest step of a rejecting pass
    assert aggregate([ACC, ACC, ACC, REJ[1]], AggregationPolicy("k_of_n", n=4, k=3)).first_error_step == -1
    assert aggregate([BAD, BAD], AggregationPolicy(n=2)).first_error_step == -1  # no step flagged
    ignored = aggregate([ACC, BAD], AggregationPolicy(n=2, unparseable="ignore"))
    assert ignored.accept_fraction == 1.0 and ignored.n_reject == 0
    assert aggregate([ACC, BAD], AggregationPolicy(n=2)).accept_fraction == 0.5


def test_bad_policies_are_refused():
    with pytest.raises(ValueError):
        AggregationPolicy("k_of_n", n=4, k=None)
    with pytest.raises(ValueError):
        AggregationPolicy("k_of_n", n=4, k=5)
    with pytest.raises(ValueError):
        AggregationPolicy("vote")
    with pytest.raises(ValueError):
        AggregationPolicy(unparseable="skip")


@pytest.mark.parametrize("kind,k", [("pessimistic", None), ("k_of_n", 3), ("majority", None)])
@pytest.mark.parametrize("unp", ["reject", "ignore"])
def test_decided_never_changes_the_decision(kind, k, unp):
    """Exhaustively: whenever a prefix is ``decided``, every way of finishing it gives the same verdict."""
    n = 5
    policy = AggregationPolicy(kind, n=n, k=k, unparseable=unp)
    early = 0
    for m in range(1, n):
        for prefix in itertools.product("aru", repeat=m):
            if not decided(passes(prefix), policy):
                continue
            early += 1
            verdicts = {aggregate(passes(prefix + rest), policy).verdict
                        for rest in itertools.product("aru", repeat=n - m)}
            assert len(verdicts) == 1, (prefix, verdicts)
    if not (unp == "ignore" and kind != "pessimistic"):
        assert early > 0  # early stopping does happen
    assert decided(passes("r"), AggregationPolicy(n=8))  # pessimism: the first rejection decides
    assert not decided(passes("aaaaaaa"), AggregationPolicy(n=8))
    assert decided(passes("aaaaaaaa"), AggregationPolicy(n=8))


def test_verdict_is_enum():
    assert aggregate([ACC], AggregationPolicy(n=1)).verdict is Verdict.VALID


def test_step_rule_reports_the_earliest_or_the_most_named_step():
    """Issue 23 item 4: with 8 passes, one pass naming a wrong earlier step decides ``earliest``."""
    code = [REJ[1], REJ[3], ACC, REJ[3], BAD]
    assert aggregate(code, AggregationPolicy(n=5)).first_error_step == 1
    assert aggregate(code, AggregationPolicy(n=5, step_rule="most_named")).first_error_step == 3
    assert aggregate([REJ[3], REJ[1]], AggregationPolicy(n=2, step_rule="most_named")).first_error_step == 1  # tie
    assert aggregate([ACC, ACC, REJ[3]], AggregationPolicy("majority", n=3, step_rule="most_named")
                     ).first_error_step == -1  # accepted: no step
    with pytest.raises(ValueError):
        AggregationPolicy(step_rule="latest")


def test_step_rule_is_a_judge_key():
    from eval.judge import JudgeAppConfig
    from verifier.config import compose

    cfg = compose("judge", JudgeAppConfig, ["input=x.jsonl", "output=y.jsonl", "judge.step_rule=most_named"])
    assert cfg.judge.aggregation().step_rule == "most_named"
    assert compose("judge", JudgeAppConfig, ["input=x.jsonl", "output=y.jsonl"]).judge.aggregation().step_rule == "earliest"


def _old_prover_score(n_accept: int, n_passes: int, policy: str) -> float:
    """The prover reward's own arithmetic before it went through ``pass_score`` (the reference)."""
    if policy == "mean":
        return n_accept / max(1, n_passes)
    return 1.0 if n_passes and n_accept == n_passes else 0.0


@pytest.mark.parametrize("judge_kind,k,unp", [("pessimistic", None, "reject"), ("k_of_n", 2, "reject"),
                                             ("majority", None, "ignore")])
def test_prover_reward_scores_equal_the_old_arithmetic(judge_kind, k, unp):
    """Hand-made pass patterns of a pool of members: the prover reward (``judgment_score`` through
    ``pass_score``, members combined by ``pool_score``) equals its former arithmetic on the runner's counts,
    under each score policy and pool rule, whatever aggregation the judge itself used."""
    from types import SimpleNamespace as NS

    from training.prover_reward import judgment_score
    from verifier.pool import pool_score

    patterns = ["aaaa", "aaar", "rrrr", "aaau", "uuuu", "a", "r", "aa", "ar", "", "aaaaaaar", "auau"]
    judge = AggregationPolicy(judge_kind, n=4, k=k, unparseable=unp)
    members = {p: NS(complete=True, passes=passes(p), aggregate=aggregate(passes(p), judge)) for p in patterns}
    for pol in ("pessimistic", "mean"):
        for p, j in members.items():
            a = j.aggregate
            assert judgment_score(j, pol) == _old_prover_score(a.n_accept, a.n_passes, pol), (p, pol)
        for pool in itertools.combinations(patterns, 3):
            new = [judgment_score(members[p], pol) for p in pool]
            old = [_old_prover_score(members[p].aggregate.n_accept, members[p].aggregate.n_passes, pol) for p in pool]
            for rule in ("all", "majority"):
                assert pool_score(new, rule) == pool_score(old, rule), (pool, pol, rule)
    assert judgment_score(NS(complete=False, passes=passes("aaaa")), "mean") is None
    assert judgment_score(None, "pessimistic") is None
