"""One recipe per file: the verifier's GRPO recipe (training/grpo.py) and the prover's (training/prover_grpo.py)
each read top to bottom in one short ``run``; the steps they share (training/recipe.py, training/trainer.py)
know nothing of the prover; each recipe owns its start-up checks (the shared check modules training/scale.py,
training/ladder.py and training/preflight.py know nothing of the prover); the run name is computed in one place."""

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


def test_the_verifier_recipe_reads_prover_only_to_dispatch():
    """training/grpo.py looks at ``prover.*`` only to hand a prover configuration to its recipe: the dispatch at the
    top of ``run``, and a sweep job's pre-launch checks in ``main`` (the prover recipe's ``CHECKS``)."""
    import training.grpo as grpo

    reads = prover_reads(REPO / "training" / "grpo.py")
    assert len(reads) == 2, f"training/grpo.py reads cfg.prover on lines {reads}; only the two dispatches may"
    lines, start = inspect.getsourcelines(grpo.run)
    body = [i for i, ln in enumerate(lines) if ln.strip() and not ln.strip().startswith(("def ", '"""', "#"))]
    first = start + body[0]
    assert reads[0] == first and "prover_grpo.run(cfg)" in lines[body[1]], "the dispatch opens grpo.run"
    source = (REPO / "training" / "grpo.py").read_text(encoding="utf-8").splitlines()
    assert "recipe.check_launch(cfg, prover_grpo.CHECKS if cfg.prover.enabled else CHECKS)" in source[reads[1] - 1]


@pytest.mark.parametrize("module", ["training/trainer.py", "training/recipe.py"])
def test_shared_steps_know_no_prover(module):
    assert prover_reads(REPO / module) == [], f"{module} reads cfg.prover: that belongs in training/prover_grpo.py"
    assert "prover_reward" not in (REPO / module).read_text(encoding="utf-8"), module


@pytest.mark.parametrize("module", ["training/scale.py", "training/ladder.py", "training/preflight.py"])
def test_shared_checks_know_no_prover(module):
    """The prover's start-up checks are the prover recipe's (``training.prover_grpo.CHECKS``)."""
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


def test_each_recipe_runs_its_own_checks(monkeypatch):
    """``grpo.run`` checks a verifier configuration with the verifier's ``CHECKS`` and hands a prover configuration
    to the prover recipe, which checks it with its own (problems files, ``prover.*`` values, no base-row rule)."""
    import training.grpo as grpo
    import training.prover_grpo as prover_grpo
    from training import ladder, recipe
    from training.config import GRPORunConfig
    from verifier.config import compose

    class Stop(Exception):
        pass

    seen = []

    def check(cfg, checks):
        seen.append(checks)
        raise Stop

    monkeypatch.setattr(recipe, "check", check)
    for experiment in ("meta_ver_rl", "prover_rl"):
        with pytest.raises(Stop):
            grpo.run(compose("grpo", GRPORunConfig, [f"experiment={experiment}"]))
    assert seen == [grpo.CHECKS, prover_grpo.CHECKS]
    assert grpo.CHECKS.validate is None and grpo.CHECKS.base_row and not prover_grpo.CHECKS.base_row
    cfg = compose("grpo", GRPORunConfig, ["experiment=prover_rl", "prover.problems=/nope/p.jsonl"])
    assert ladder.data_files(cfg) == []  # the verifier's files: trajectories (synthetic here), not problems
    with pytest.raises(ladder.LadderConfigError, match=r"^prover\.problems=/nope/p\.jsonl: no such file$"):
        ladder.prepare(cfg, prover_grpo.data_files, base_row=False)
