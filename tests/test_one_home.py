"""Concepts with one home: one sampling config (``verifier.config.Sampling``, what every engine takes and every
generating command's config inherits) and one place that starts a W&B run (``verifier.results.init_run``)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("verifier", "data_pipeline", "eval", "training", "launch", "bench")


def _sources(suffixes=(".py",)):
    for pkg in PACKAGES:
        for f in sorted((REPO / pkg).rglob("*")):
            if f.suffix in suffixes and f.is_file():
                yield f


def test_one_sampling_class():
    import verifier.engine
    import verifier.offline
    from data_pipeline.candidates import CriticConfig
    from verifier.config import JudgeConfig, Sampling
    from verifier.generation import GenerationConfig

    # the engines' name for it is gone, from the code, the configs and the docs
    assert not hasattr(verifier.engine, "SamplingConfig")
    texts = [*_sources((".py", ".md", ".yaml", ".sh")), *sorted((REPO / "docs").rglob("*.md")),
             *sorted((REPO / "configs").rglob("*.yaml")), REPO / "README.md", REPO / "Makefile"]
    assert [str(f.relative_to(REPO)) for f in texts if "SamplingConfig" in f.read_text(encoding="utf-8")] == []
    # every engine takes it; every generating command's config is one
    for gen in (verifier.engine.Engine.generate, verifier.engine.OpenAIEngine.generate,
                verifier.offline.VLLMOfflineEngine.generate):
        assert inspect.signature(gen).parameters["sampling"].annotation == "Sampling"
    assert verifier.engine.Sampling is Sampling
    for cfg in (JudgeConfig, GenerationConfig, CriticConfig):
        assert issubclass(cfg, Sampling)
    s = JudgeConfig(temperature=0.3, top_p=0.9, max_tokens=7, stop=["</v>"], n=3).sampling()
    assert type(s) is Sampling and s == Sampling(temperature=0.3, top_p=0.9, max_tokens=7, stop=["</v>"])


def _wandb_init_calls(path: Path, root: Path = REPO) -> list[str]:
    """``wandb.init(...)`` calls (and ``from wandb import init``) in a file, as ``path:innermost function``."""
    out: list[str] = []

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            where = node.name
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "init" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "wandb":
            out.append(f"{path.relative_to(root)}:{where}")
        if isinstance(node, ast.ImportFrom) and node.module == "wandb" and any(a.name == "init" for a in node.names):
            out.append(f"{path.relative_to(root)}:from wandb import init")
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), "<module>")
    return out


def test_one_place_starts_a_wandb_run():
    calls = [c for f in _sources() for c in _wandb_init_calls(f)]
    assert calls == ["verifier/results.py:init_run"], calls


def test_the_scan_sees_every_call(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import wandb\nfrom wandb import init\nrun = wandb.init()\n\n"
                 "def start():\n    def inner():\n        return wandb.init(project='p')\n    return inner()\n")
    assert _wandb_init_calls(f, tmp_path) == ["x.py:from wandb import init", "x.py:<module>", "x.py:inner"]
