"""Prompt templates are files, rendered by one function, with zero-based step numbers."""

from verifier.records import Annotation, ProofTrajectory, VerificationOutput, ParseStatus, Verdict
from verifier.templates import (TEMPLATE_DIR, generation_prompt, meta_verification_prompt, repair_prompt,
                                verification_prompt)

T = ProofTrajectory(id="t", problem_id="p", problem="Prove 1+1=2.", proof_steps=("one", "two", "three"),
                    reference_solution="REFSOL",
                    annotation=Annotation(reviewer_comment="step 2 wrong", first_fatal_error_step=2,
                                          recoverable_error_steps=(0,), correction="fix step 2"))


def test_templates_are_files():
    names = {p.stem for p in TEMPLATE_DIR.glob("*.j2")}
    assert {"verify", "meta_verify", "generate_proof", "repair_proof"} <= names


def test_verification_prompt_with_and_without_reference():
    p = verification_prompt(T)
    assert "Step 0: one" in p and "Step 2: three" in p and "Step 3" not in p
    assert "REFSOL" in p and "first_error_step" in p and "-1" in p
    assert "REFSOL" not in verification_prompt(T, with_reference=False)


def test_meta_generation_repair_prompts():
    out = VerificationOutput(ParseStatus.OK, Verdict.INVALID, 2, "Step 2 divides by zero")
    m = meta_verification_prompt(T, out)
    for needle in ("Expert verdict: invalid", "First fatal error step: 2", "Recoverable error steps: 0",
                   "step 2 wrong", "Step 2 divides by zero", "EXACT_MATCH", "WRONG_POLARITY"):
        assert needle in m
    assert "Prove 1+1=2." in generation_prompt(T.problem)
    r = repair_prompt(T)
    assert "fix step 2" in r and "Step 1: two" in r
