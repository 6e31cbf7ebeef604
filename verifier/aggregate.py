"""Aggregation of n verification passes into one decision (section 4.4; TCS-Bench k-of-n).

Policies: ``pessimistic`` (accept only if all n passes accept; the paper's default
with n=8), ``k_of_n`` (accept if at least k of n accept, e.g. 3 of 4), ``majority``.
An unparseable pass counts as a rejection by default (``unparseable="reject"``) or
is left out (``"ignore"``); either way it is counted and reported. The accept
fraction is the score for AUC. A rejection reports one first error step: the earliest
step a rejecting pass names (``step_rule="earliest"``, the default) or the step most
rejecting passes name (``"most_named"``, ties to the earliest of them;
with 8 passes one pass naming a wrong earlier step decides the earliest).

A proof's score in [0, 1] (the prover reward) is ``pass_score``: ``pessimistic`` (1 when the pessimistic
policy accepts all the passes, else 0) or ``mean`` (the accept fraction, an unparseable pass not accepting).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal, Sequence

from verifier.errors import InputError
from verifier.records import NO_STEP, Verdict, VerificationOutput


@dataclass(frozen=True)
class AggregationPolicy:
    """How n passes become one verdict."""

    kind: Literal["pessimistic", "k_of_n", "majority"] = "pessimistic"
    n: int = 8
    k: int | None = None  # k_of_n only
    unparseable: Literal["reject", "ignore"] = "reject"
    step_rule: Literal["earliest", "most_named"] = "earliest"  # the step a rejection reports

    def __post_init__(self) -> None:
        if self.kind not in ("pessimistic", "k_of_n", "majority"):
            raise InputError(f"unknown aggregation policy {self.kind!r}")
        if self.kind == "k_of_n" and (self.k is None or not 1 <= self.k <= self.n):
            raise InputError(f"k_of_n needs 1 <= k <= n, got k={self.k}, n={self.n}")
        if self.unparseable not in ("reject", "ignore"):
            raise InputError(f"unparseable must be reject or ignore, got {self.unparseable!r}")
        if self.step_rule not in ("earliest", "most_named"):
            raise InputError(f"step_rule must be earliest or most_named, got {self.step_rule!r}")

    @property
    def needed_accepts(self) -> int:
        """Accepting passes needed out of n (when every pass parses)."""
        if self.kind == "pessimistic":
            return self.n
        if self.kind == "k_of_n":
            return int(self.k)  # type: ignore[arg-type]
        return self.n // 2 + 1


@dataclass(frozen=True)
class Aggregate:
    """The decision over the passes, with the counts behind it."""

    verdict: Verdict | None  # None only when read from a row without a parseable verdict (predictions files)
    first_error_step: int
    accept_fraction: float | None  # None only when read from a row with neither the fraction nor passes
    n_passes: int
    n_accept: int
    n_reject: int
    n_unparseable: int

    @property
    def accepts(self) -> bool:
        return self.verdict is Verdict.VALID


def _counts(passes: Sequence[VerificationOutput], policy: AggregationPolicy) -> tuple[int, int, int]:
    acc = sum(1 for p in passes if p.accepts)
    unp = sum(1 for p in passes if not p.ok)
    rej = len(passes) - acc - (unp if policy.unparseable == "ignore" else 0)
    return acc, rej, unp


def aggregate(passes: Sequence[VerificationOutput], policy: AggregationPolicy = AggregationPolicy()) -> Aggregate:
    """Combine passes into one verdict; a rejection's first error step follows ``policy.step_rule``.

    >>> from verifier.parser import parse_verification as p, format_verification as f
    >>> ok, bad = p(f("valid", -1, "")), p(f("invalid", 3, ""))
    >>> aggregate([ok] * 7 + [bad]).verdict.value
    'invalid'
    >>> aggregate([ok, ok, ok, bad], AggregationPolicy("k_of_n", n=4, k=3)).verdict.value
    'valid'
    >>> aggregate([ok, p("garbage")], AggregationPolicy(n=2)).n_unparseable
    1
    >>> two, five = p(f("invalid", 2, "")), p(f("invalid", 5, ""))
    >>> [aggregate([two, five, five], AggregationPolicy(n=3, step_rule=r)).first_error_step for r in ("earliest", "most_named")]
    [2, 5]
    """
    acc, rej, unp = _counts(passes, policy)
    counted = acc + rej
    if policy.kind == "pessimistic":
        accept = counted > 0 and rej == 0
    elif policy.kind == "k_of_n":
        accept = acc >= int(policy.k)  # type: ignore[arg-type]
    else:
        accept = counted > 0 and acc * 2 > counted
    steps = [p.first_error_step for p in passes if p.ok and p.verdict is Verdict.INVALID and p.first_error_step >= 0]
    first = NO_STEP if accept or not steps else reported_step(steps, policy.step_rule)
    return Aggregate(
        verdict=Verdict.VALID if accept else Verdict.INVALID,
        first_error_step=first,
        accept_fraction=acc / counted if counted else 0.0,
        n_passes=len(passes),
        n_accept=acc,
        n_reject=rej,
        n_unparseable=unp,
    )


def reported_step(steps: Sequence[int], rule: str = "earliest") -> int:
    """The first error step a rejection reports, of the steps its rejecting passes name (``step_rule``).

    >>> reported_step([4, 2, 4]), reported_step([4, 2, 4], "most_named"), reported_step([3, 1], "most_named")
    (2, 4, 1)
    """
    if rule == "earliest":
        return min(steps)
    counts = Counter(steps)
    return min(steps, key=lambda s: (-counts[s], s))


def decided(passes: Sequence[VerificationOutput], policy: AggregationPolicy) -> bool:
    """True when the passes so far already fix the decision of all ``policy.n`` passes.

    Pessimistic: the first rejecting pass decides (early-stop pessimism). k-of-n: k
    accepts, or more than n-k rejects. Majority: likewise with k = n//2 + 1.

    >>> from verifier.parser import parse_verification as p, format_verification as f
    >>> decided([p(f("valid", -1, ""))], AggregationPolicy(n=8)), decided([p(f("invalid", 0, ""))], AggregationPolicy(n=8))
    (False, True)
    """
    if len(passes) >= policy.n:
        return True
    if policy.unparseable == "ignore" and policy.kind != "pessimistic":
        return False  # ignored passes change the denominator; run them all
    acc, rej, _ = _counts(passes, policy)
    need = policy.needed_accepts
    return acc >= need or rej > policy.n - need


SCORE_KINDS = ("pessimistic", "mean")


def pass_score(passes: Sequence[VerificationOutput], kind: str = "pessimistic") -> float:
    """A proof's score from its passes (the prover reward): ``pessimistic``: 1.0 when ``aggregate`` under the
    pessimistic policy accepts (every pass accepts), else 0.0; ``mean``: its accept fraction, an unparseable pass
    counting as not accepting. No pass scores 0.0.

    >>> from verifier.parser import parse_verification as p, format_verification as f
    >>> ok, bad, junk = p(f("valid", -1, "")), p(f("invalid", 3, "")), p("garbage")
    >>> pass_score([ok, ok, bad, ok]), pass_score([ok, ok, bad, ok], "mean"), pass_score([ok, junk], "mean")
    (0.0, 0.75, 0.5)
    >>> pass_score([ok, ok]), pass_score([], "mean")
    (1.0, 0.0)
    """
    if kind not in SCORE_KINDS:
        raise InputError(f"score policy: expected one of {', '.join(SCORE_KINDS)}, got {kind!r}")
    agg = aggregate(passes, AggregationPolicy("pessimistic", n=max(1, len(passes))))
    if kind == "mean":
        return float(agg.accept_fraction or 0.0)
    return 1.0 if agg.accepts else 0.0
