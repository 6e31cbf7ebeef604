"""Meta-verifier: grade a verification output against the expert annotation (sections 3.3, 4.3).

One interface, two implementations, used by the evaluator (Meta-Verification
scores) and by the GRPO reward (1.0 / 0.5 / 0.25 / 0):

* ``LLMMetaVerifier`` - the B.3 prompt on any engine (its own vLLM server), parsed
  by the one parser; all calls of a batch in flight at once. ``template="meta_verify_analysis"``
  grades the same way without an annotation: is the issue the verifier reports real (the
  expert-free labeller ``data_pipeline.autolabel``).
* ``RuleMetaVerifier`` - polarity, then first-error-step exact or near match, then
  coverage of the recoverable steps in the rationale. Cheap; for tests and CPU runs.

A failed or unparseable meta-verification has ``grade=None`` and is counted by callers,
never silently turned into a zero; one cut off by its token budget is ``truncated``
(raise the meta-verifier endpoint's ``max_tokens``: reasoning judges think first).

What the meta-verifier sees (B.3): the verifier's verdict and rationale, without the
verifier's private reasoning (``<think>`` or ``reasoning_content``) unless
``show_reasoning=True``; callers write the choice into their run config.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from verifier.config import MetaVerifierConfig, Sampling
from verifier.engine import Engine, GenerationRequest, OpenAIEngine, base_seed
from verifier.errors import InputError
from verifier.parser import parse_meta_completion
from verifier.records import (
    MetaGrade,
    MetaVerification,
    ParseStatus,
    ProofTrajectory,
    VerificationOutput,
)
from verifier.templates import as_messages, meta_verification_prompt

_STEP_MENTION = re.compile(r"\bsteps?\s*#?\s*(\d+(?:\s*(?:,|and|&)\s*\d+)*)", re.IGNORECASE)


def mentioned_steps(text: str) -> set[int]:
    """Step indices a rationale mentions ("step 3", "steps 2 and 5").

    >>> sorted(mentioned_steps("Step 3 is wrong; steps 2, 5 and 7 are fine."))
    [2, 3, 5, 7]
    """
    out: set[int] = set()
    for m in _STEP_MENTION.finditer(text or ""):
        out.update(int(x) for x in re.findall(r"\d+", m.group(1)))
    return out


class MetaVerifier(Protocol):
    def grade_batch(self, pairs: Sequence[tuple[ProofTrajectory, VerificationOutput]]) -> list[MetaVerification]: ...

    async def agrade_batch(self, pairs: Sequence[tuple[ProofTrajectory, VerificationOutput]]
                           ) -> list[MetaVerification]: ...


@dataclass
class RuleMetaVerifier:
    """Rule-based meta-verifier.

    WRONG_POLARITY if the verdict differs from the gold polarity (or did not parse);
    for an invalid proof, EXACT_MATCH if the first error step equals the gold fatal step
    and every recoverable step is mentioned, BASIC_MATCH if the step is exact or within
    ``near`` steps, POOR_MATCH otherwise; for a valid proof, EXACT_MATCH if every
    recoverable step (if any) is mentioned, else BASIC_MATCH.
    """

    near: int = 1

    def grade(self, traj: ProofTrajectory, out: VerificationOutput) -> MetaVerification:
        ann = traj.annotation
        if ann is None:
            raise InputError(f"record {traj.id!r}: meta-verification needs an expert annotation")
        if not out.ok or out.verdict is not ann.polarity:
            why = "output did not parse" if not out.ok else f"verdict {out.verdict.value} vs gold {ann.polarity.value}"
            return MetaVerification(ParseStatus.OK, MetaGrade.WRONG_POLARITY, why)
        rec = set(ann.recoverable_error_steps)
        covered = rec <= mentioned_steps(out.rationale)
        if ann.is_valid:
            grade = MetaGrade.EXACT_MATCH if covered else MetaGrade.BASIC_MATCH
            return MetaVerification(ParseStatus.OK, grade, f"polarity right; recoverable steps covered: {covered}")
        if ann.fatal_step_unknown:
            return MetaVerification(ParseStatus.OK, MetaGrade.BASIC_MATCH, "polarity right; fatal step not annotated")
        gold, pred = ann.first_fatal_error_step, out.first_error_step
        if pred == gold:
            grade = MetaGrade.EXACT_MATCH if covered else MetaGrade.BASIC_MATCH
        elif pred >= 0 and abs(pred - gold) <= self.near:
            grade = MetaGrade.BASIC_MATCH
        else:
            grade = MetaGrade.POOR_MATCH
        return MetaVerification(ParseStatus.OK, grade, f"first error step {pred} vs gold {gold}; covered: {covered}")

    def grade_batch(self, pairs):
        return [self.grade(t, o) for t, o in pairs]

    async def agrade_batch(self, pairs):
        return self.grade_batch(pairs)


@dataclass
class LLMMetaVerifier:
    """The B.3 meta-verification prompt on an engine, parsed by the one parser."""

    engine: Engine
    sampling: Sampling = field(default_factory=lambda: Sampling(temperature=0.0, max_tokens=512))
    run_seed: int = 0
    show_reasoning: bool = False  # also show the verifier's private reasoning (default: rationale only, B.3)
    template: str = "meta_verify"  # B.3 against the expert annotation; meta_verify_analysis: without one

    def requests(self, pairs: Sequence[tuple[ProofTrajectory, VerificationOutput]]) -> list[GenerationRequest]:
        return [GenerationRequest(as_messages(meta_verification_prompt(t, o, show_reasoning=self.show_reasoning,
                                                                       template=self.template)),
                                  n=1, seed=base_seed(f"meta:{t.id}", self.run_seed), key=t.id) for t, o in pairs]

    @staticmethod
    def _parse(results) -> list[MetaVerification]:
        """One grade per request: ``truncated`` when the judge hit its budget, never a guess."""
        return [parse_meta_completion(c.text, c.finish_reason, c.reasoning, status=c.status, error=c.error)
                for [c] in results]

    def grade_batch(self, pairs):
        return self._parse(self.engine.generate(self.requests(pairs), self.sampling))

    async def agrade_batch(self, pairs):
        return self._parse(await self.engine.agenerate(self.requests(pairs), self.sampling))


def make_meta_verifier(cfg: MetaVerifierConfig, key: str = "meta.kind") -> MetaVerifier:
    """The configured meta-verifier (one interface: ``grade_batch(pairs)``); ``key`` names the kind's
    config key in the error message (``reward.meta.kind`` for the GRPO reward)."""
    if cfg.kind == "rule":
        return RuleMetaVerifier(near=cfg.near)
    if cfg.kind == "llm":
        # endpoint.max_tokens, when set, is the judge's budget (OpenAIEngine); else max_tokens
        return LLMMetaVerifier(OpenAIEngine(cfg.endpoint),
                               Sampling(temperature=cfg.temperature, max_tokens=cfg.max_tokens), cfg.run_seed,
                               show_reasoning=cfg.show_reasoning, template=cfg.template)
    raise InputError(f"unknown meta judge {cfg.kind!r}: {key} must be rule or llm")
