"""One recipe per file: the verifier's GRPO recipe (training/grpo.py) and the prover's (training/prover_grpo.py)
each read top to bottom in one short ``run``; the steps they share (training/recipe.py, training/trainer.py)
know nothing of the prover; the run name is computed in one place."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_RECIPE_LINES = 150


def prover_reads(path: Path) -> list[int]:
    """Lines of ``path`` that read a ``.prover`` attribute (``cfg.prover.enabled``, ``cfg.prover.template``, ...)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sorted(n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "prover")


def calls_of(path: Path, name: str) -> list[int]:
    """Lines of ``path`` that call ``name(...)`` (a bare name or an attribute)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
            and getattr(n.func, "id", getattr(n.func, "attr", None)) == name]


def test_the_verifier_recipe_reads_prover_once():
    """training/grpo.py looks at ``prover.*`` once: the dispatch to the prover's recipe, at the top of ``run``."""
    import training.grpo as grpo

    reads = prover_reads(REPO / "training" / "grpo.py")
    assert len(reads) == 1, f"training/grpo.py reads cfg.prover on lines {reads}; only the dispatch may"
    lines, start = inspect.getsourcelines(grpo.run)
    body = [i for i, ln in enumerate(lines) if ln.strip() and not ln.strip().startswith(("def ", '"""', "#"))]
    first = start + body[0]
    assert reads == [first] and "prover_grpo.run(cfg)" in lines[body[1]], "the dispatch opens grpo.run"


@pytest.mark.parametrize("module", ["training/trainer.py", "training/recipe.py"])
def test_shared_steps_know_no_prover(module):
    assert prover_reads(REPO / module) == [], f"{module} reads cfg.prover: that belongs in training/prover_grpo.py"
    assert "prover_reward" not in (REPO / module).read_text(encoding="utf-8"), module


def test_each_recipe_is_short():
    import training.grpo as grpo
    import training.prover_grpo as prover_grpo

    for fn in (grpo.run, prover_grpo.run):
        n = len(inspect.getsourcelines(fn)[0])
        assert n < MAX_RECIPE_LINES, f"{fn.__module__}.run is {n} lines (< {MAX_RECIPE_LINES})"


def test_run_name_is_computed_in_one_place():
    """``training.tracking.run_name`` is called once in the training code: when a recipe opens its run."""
    calls = {str(p.relative_to(REPO)): calls_of(p, "run_name") for p in sorted((REPO / "training").glob("*.py"))}
    calls = {k: v for k, v in calls.items() if v}
    assert list(calls) == ["training/recipe.py"] and len(calls["training/recipe.py"]) == 1, calls


def test_python_callers_of_training_grpo_run_reach_the_prover_recipe(monkeypatch):
    """``training.grpo.run`` with a prover configuration runs the prover's recipe (benches and tests call it)."""
    import training.grpo as grpo
    import training.prover_grpo as prover_grpo
    from training.config import GRPORunConfig
    from verifier.config import compose

    seen = []
    monkeypatch.setattr(prover_grpo, "run", lambda cfg: seen.append(cfg.experiment_name) or {"ran": "prover"})
    assert grpo.run(compose("grpo", GRPORunConfig, ["experiment=prover_rl"])) == {"ran": "prover"}
    assert seen == ["prover_rl"]
