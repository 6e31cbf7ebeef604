"""Judge pools: several verifier endpoints (of different models) decide together.

A proof is accepted by the pool only when ``all`` members accept (default), or a strict ``majority``
(more than half). Each member judges on its own with the one judging runner (``verifier.runner``:
its own passes, policy and output file); the pool only combines the members' decisions, so the
report can show every model's acceptance beside the pool's.

``pool_score`` generalises the rule to scores in [0, 1] (the prover reward's mean over n passes):
the k-th largest member score, k = every member (``all``: the minimum) or ``m // 2 + 1`` (``majority``).
On 0/1 decisions it is exactly the accept rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from verifier.config import EndpointConfig

POOL_RULES = ("all", "majority")


@dataclass
class PoolConfig:
    """Extra verifiers beside the main one (``pool.verifiers``) and how their decisions combine."""

    verifiers: list[EndpointConfig] = field(default_factory=list)  # empty: the main verifier alone
    rule: str = "all"  # all | majority (strictly more than half of the members)

    def validate(self) -> None:
        if self.rule not in POOL_RULES:
            raise ValueError(f"pool.rule: expected one of {list(POOL_RULES)}, got {self.rule!r}")


def needed(m: int, rule: str) -> int:
    """How many of ``m`` members must accept.

    >>> [needed(m, "all") for m in (1, 2, 3)], [needed(m, "majority") for m in (1, 2, 3, 4)]
    ([1, 2, 3], [1, 2, 2, 3])
    """
    if rule not in POOL_RULES:
        raise ValueError(f"pool rule: expected one of {list(POOL_RULES)}, got {rule!r}")
    if m < 1:
        raise ValueError("a judge pool needs at least one member")
    return m if rule == "all" else m // 2 + 1


def pool_score(scores: Sequence[float], rule: str = "all") -> float:
    """The pool's score from its members' scores in [0, 1] (the k-th largest, k = ``needed``).

    >>> pool_score([1.0, 0.5, 0.75], "all"), pool_score([1.0, 0.5, 0.75], "majority")
    (0.5, 0.75)
    """
    k = needed(len(scores), rule)
    return sorted((float(s) for s in scores), reverse=True)[k - 1]


def pool_accepts(accepts: Sequence[bool], rule: str = "all") -> bool:
    """Accepted by the pool: every member accepts (``all``) or strictly more than half (``majority``).

    >>> pool_accepts([True, True, False], "all"), pool_accepts([True, True, False], "majority")
    (False, True)
    >>> pool_accepts([True, False], "majority")
    False
    """
    return sum(bool(a) for a in accepts) >= needed(len(accepts), rule)


def member_labels(endpoints: Sequence[Any]) -> list[str]:
    """A short unique label per member (its model name; a repeated name gets ``#k``).

    >>> from types import SimpleNamespace as NS
    >>> member_labels([NS(model="a/v1"), NS(model="b"), NS(model="a/v1")])
    ['a/v1', 'b', 'a/v1#2']
    """
    out: list[str] = []
    for i, ep in enumerate(endpoints):
        name = str(getattr(ep, "model", "") or f"verifier{i}")
        out.append(name if name not in out else f"{name}#{i}")
    return out
