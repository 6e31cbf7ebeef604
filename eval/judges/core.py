"""Template judges on the one runner: template + parser + sampling (+ aggregation policy) from the one judge config.

``Judge(endpoint, JudgeConfig(template="ineq_step_logical_gap", parser="step_judgment", n=1))``
(``verifier.judging.JudgeConfig``, the same config every command judges with) renders
``verifier/prompts/<template>.j2`` with the item's fields and judges the items with
``verifier.runner.judge``: one request of ``n`` samples per item (seed of sample i =
base_seed(template:key, run_seed) + i, the engine's rule), each sample parsed with
``verifier.parser.parse_<parser>``.
Failed requests and truncated generations keep an explicit ``ParseStatus``; nothing is
dropped. ``structured=True`` asks vLLM for structured outputs (a regex for the answer
block, see ``answer_regex``) so even a random-weight model answers parseably.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from verifier import parser as _parser
from verifier.aggregate import AggregationPolicy
from verifier.config import EndpointConfig
from verifier.engine import Completion, OpenAIEngine, base_seed
from verifier.errors import InputError
from verifier.judging import JudgeConfig
from verifier.records import ParseStatus
from verifier.runner import Item, judge
from verifier.templates import render


@dataclass
class PolicyConfig:
    """Hydra mirror of ``verifier.aggregate.AggregationPolicy`` (IneqMath's ``step_policy``; a judge's own is
    ``JudgeConfig.aggregation()``, e.g. TCS-Bench's k_of_n, n=4, k=3)."""

    kind: str = "pessimistic"
    n: int = 1
    k: int | None = None
    unparseable: str = "reject"
    step_rule: str = "earliest"  # earliest | most_named

    def policy(self) -> AggregationPolicy:
        return AggregationPolicy(self.kind, n=self.n, k=self.k, unparseable=self.unparseable,  # type: ignore[arg-type]
                                 step_rule=self.step_rule)  # type: ignore[arg-type]


@dataclass
class JudgeCall:
    """One sample of one judge on one item, parsed."""

    key: str
    index: int
    seed: int | None
    text: str
    completion_status: str
    parsed: Any = None  # VerificationOutput | JudgeAnswer | None (generator)
    error: str | None = None
    completion_tokens: int = 0

    @property
    def ok(self) -> bool:
        return self.parsed.ok if self.parsed is not None else self.completion_status == "ok"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"index": self.index, "seed": self.seed, "completion_status": self.completion_status,
                             "text": self.text}
        if self.error:
            d["error"] = self.error
        if self.parsed is not None:
            p = self.parsed
            d["parse_status"] = p.status.value
            d["detail"] = p.detail
            if hasattr(p, "verdict"):
                d["verdict"] = None if p.verdict is None else p.verdict.value
            if hasattr(p, "value"):
                d["value"] = p.value
        return d


def parse_function(name: str, **kwargs: Any) -> Callable[[str], Any] | None:
    """``verifier.parser.parse_<name>`` with fixed keyword arguments; None for ``none``."""
    if name in ("none", "", None):
        return None
    fn = getattr(_parser, f"parse_{name}", None)
    if fn is None:
        raise InputError(f"unknown parser {name!r}: verifier.parser has no parse_{name}")
    return (lambda text: fn(text, **kwargs)) if kwargs else fn


_ANSWER = {
    "step_judgment": r"verdict: (pass|fail)",
    "critique": r"verdict: (correct|incorrect)",
    "equivalence": r"equivalent: (yes|no)",
    "relation_answer": r"relation: (>|>=|=|<=|<)",
    "bound_answer": r"bound: -?[1-9][0-9]?(/[1-9][0-9]?)?",
    "verification": r"verdict: (valid\nfirst_error_step: -1|invalid\nfirst_error_step: [0-9])",
}


def answer_regex(parser: str, dimensions: Sequence[str] = (), rationale_chars: int = 24) -> str:
    """Structured-output regex: a short rationale then the answer block the parser reads.

    >>> answer_regex("step_judgment", rationale_chars=0)
    '\\\\n<final_answer>\\\\nverdict: (pass|fail)\\\\n</final_answer>'
    >>> "automation_fit: ([1-9]|10)" in answer_regex("rubric_scores", ["automation fit"])
    True
    """
    if parser == "rubric_scores":
        body = r"\n".join(f"{_parser._clean_key(d)}: ([1-9]|10)" for d in dimensions)
    elif parser in _ANSWER:
        body = _ANSWER[parser]
    else:
        raise InputError(f"no structured-output regex for parser {parser!r}")
    lead = f"[a-z ]{{0,{rationale_chars}}}" if rationale_chars else ""
    return lead + r"\n<final_answer>\n" + body + r"\n</final_answer>"


def _failed(parse: Callable[[str], Any], status: ParseStatus, detail: str) -> Any:
    return dataclasses.replace(parse(""), status=status, detail=detail)


class Judge:
    """Render, sample and parse one judge over many items, on the one runner (``verifier.runner.judge``)."""

    def __init__(self, endpoint: EndpointConfig, cfg: JudgeConfig, parse_kwargs: dict[str, Any] | None = None,
                 dimensions: Sequence[str] = ()):
        self.cfg = cfg
        self.parse = parse_function(cfg.parser, **(parse_kwargs or {}))
        regex = cfg.regex or (answer_regex(cfg.parser, dimensions, cfg.rationale_chars) if cfg.structured else None)
        ep = endpoint
        if regex:
            ep = dataclasses.replace(endpoint, extra_body={**(endpoint.extra_body or {}), "structured_outputs": {"regex": regex}})
        self.engine = OpenAIEngine(ep)

    def prompt(self, fields: dict[str, Any]) -> str:
        return render(self.cfg.template, **fields)

    def seed(self, key: str) -> int:
        return base_seed(self.seed_key(key), self.cfg.run_seed)

    def seed_key(self, key: str) -> str:
        return f"{self.cfg.template}:{key}"

    def read(self, c: Completion) -> Any:
        """A completion parsed by the judge's parser; failures keep an explicit status."""
        if self.parse is None:
            return None
        if c.status == "too_long":
            return _failed(self.parse, ParseStatus.TOO_LONG, c.error or "prompt too long")
        if c.status != "ok":
            return _failed(self.parse, ParseStatus.REQUEST_FAILED, c.error or "request failed")
        parsed = self.parse(c.text)
        if not parsed.ok and c.finish_reason == "length":
            parsed = dataclasses.replace(parsed, status=ParseStatus.TRUNCATED, detail=f"hit max_tokens ({parsed.detail})")
        return parsed

    def item(self, key_fields: tuple[str, dict[str, Any]], cfg: JudgeConfig) -> Item:
        key, fields = key_fields
        return Item(key, self.prompt(fields), self.read, self.seed_key(key))

    def run(self, items: Sequence[tuple[str, dict[str, Any]]], progress: bool = False) -> list[list[JudgeCall]]:
        """``items`` are (key, template fields); returns ``n`` parsed calls per item, in order.

        One request of ``n`` samples per item (seed of sample i = ``seed(key) + i``); in memory.
        """
        if not items:
            return []
        res = judge(items, self.engine, self.cfg, None, item=self.item, to_row=lambda j: {"id": j.id},
                    progress=progress, desc=f"judge {self.cfg.template}")
        result = []
        for (key, _), j in zip(items, res.judgments, strict=True):
            assert j is not None
            result.append([JudgeCall(key, i, j.seeds[i], c.text, c.status, j.passes[i], c.error, c.completion_tokens)
                           for i, c in enumerate(j.completions)])
        return result


def parse_counts(calls: Sequence[JudgeCall]) -> dict[str, int]:
    """How many calls ended in each parse status (reported for every judge)."""
    out: dict[str, int] = {}
    for c in calls:
        s = c.parsed.status.value if c.parsed is not None else c.completion_status
        out[s] = out.get(s, 0) + 1
    return dict(sorted(out.items()))


