"""Judges from the other seeds (IneqMath, TCS-Bench, ProofJudge) on the shared layers.

A judge is a template (``verifier/prompts/*.j2``) plus a ``JudgeConfig``: it renders
through ``verifier.templates.render``, samples through the engine layer, parses with a
``parse_*`` function of ``verifier.parser`` and aggregates with ``verifier.aggregate``.
"""

from eval.judges.core import Judge, JudgeCall, PolicyConfig, answer_regex
from verifier.judging import JudgeConfig

__all__ = ["Judge", "JudgeCall", "JudgeConfig", "PolicyConfig", "answer_regex"]
