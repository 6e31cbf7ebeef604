"""The floors of the code base (docs/architecture.md): imports only point down, no import circle.

Floors, bottom to top: verifier < data_pipeline < eval < training < launch, bench. Every import
statement of every module counts, at module top or inside a function (collected with ``ast``), and
every module imports on its own in a fresh interpreter.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FLOORS = {"verifier": 1, "data_pipeline": 2, "eval": 3, "training": 4, "launch": 5, "bench": 5}

# Entry scripts on the top floor although they live in a lower package: the documented command is
# `accelerate launch training/grpo.py`, and the recipe hands a submitit sweep job to launch/jobs.py; the loop
# (`python -m training.loop`) runs that recipe in its stages. No module below the top floor may import them
# (checked like any other floor).
ENTRY_SCRIPTS = {"training.grpo": 5, "training.loop": 5}
# Known violations, (importer, imported) — each with why it is still here; keep this list short.
ALLOWED_UPWARD: set[tuple[str, str]] = set()
ALLOWED_CYCLES: set[frozenset[str]] = set()


def modules() -> dict[str, Path]:
    """Every module of our packages, by dotted name."""
    out = {}
    for pkg in FLOORS:
        for f in sorted((REPO / pkg).rglob("*.py")):
            parts = list(f.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


MODULES = modules()


def _resolve(name: str) -> str | None:
    """The module of ours an imported name lives in (``verifier.records.Verdict`` -> ``verifier.records``)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(path: Path) -> dict[str, int]:
    """Our modules that ``path`` imports anywhere in the file (top level or nested), with a line of each."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for n in names:
            if n.split(".")[0] in FLOORS and (m := _resolve(n)) is not None:
                found.setdefault(m, node.lineno)
    return found


GRAPH = {m: {k: v for k, v in imports_of(f).items() if k != m} for m, f in MODULES.items()}


def _floor(module: str) -> int:
    return ENTRY_SCRIPTS.get(module, FLOORS[module.split(".")[0]])


def test_no_package_imports_a_package_above_it():
    bad = [f"{m} (line {line}) imports {t}: floor {_floor(m)} -> {_floor(t)}"
           for m, targets in GRAPH.items() for t, line in targets.items()
           if _floor(t) > _floor(m) and (m, t) not in ALLOWED_UPWARD]
    assert not bad, "imports that point up:\n" + "\n".join(bad)
    stale = [pair for pair in ALLOWED_UPWARD if pair[1] not in GRAPH.get(pair[0], {})]
    assert not stale, f"allowlisted imports that are gone (drop them from ALLOWED_UPWARD): {stale}"


def _cycles() -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []
    for root in GRAPH:
        if root in index:
            continue
        work = [(root, iter(GRAPH[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(GRAPH[w])))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def test_no_import_cycle_between_modules():
    cycles = _cycles()
    bad = [sorted(c) for c in cycles if c not in ALLOWED_CYCLES]
    detail = "\n".join(f"{sorted(c)}: " + "; ".join(f"{a} -> {b} (line {GRAPH[a][b]})" for a in sorted(c)
                                                    for b in sorted(GRAPH[a]) if b in c) for c in map(set, bad))
    assert not bad, "import cycles:\n" + detail
    stale = [sorted(c) for c in ALLOWED_CYCLES if c not in cycles]
    assert not stale, f"allowlisted cycles that are gone (drop them from ALLOWED_CYCLES): {stale}"


def test_the_checks_see_nested_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\n\ndef f():\n    from eval.metrics import Prediction\n    import verifier.records\n")
    assert imports_of(f) == {"eval.metrics": 4, "verifier.records": 5}


@pytest.mark.parametrize("pkg", sorted(FLOORS))
def test_every_module_imports_in_a_fresh_interpreter(pkg):
    """One fresh interpreter per module (so no module relies on another having been imported first)."""
    names = [m for m in MODULES if m.split(".")[0] == pkg]
    code = ("import importlib, subprocess, sys\n"
            "bad = []\n"
            "for m in sys.argv[1:]:\n"
            "    r = subprocess.run([sys.executable, '-c', f'import {m}'], capture_output=True, text=True)\n"
            "    if r.returncode:\n"
            "        bad.append(m + ': ' + (r.stderr.strip().splitlines() or ['?'])[-1])\n"
            "print('\\n'.join(bad))\n"
            "sys.exit(1 if bad else 0)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", code, *names], cwd=REPO, env=env, capture_output=True, text=True)
    assert r.returncode == 0, f"modules that fail to import on their own:\n{r.stdout}{r.stderr[-2000:]}"


def test_no_issue_numbers_in_library_code():
    """Library code and docstrings cite the paper's sections, not this project's issue tracker (reports/ and
    docs/ say which experiment answered which question)."""
    import re

    pattern = re.compile(r"\bissues? ?#?\d+|\(issue\b", re.IGNORECASE)
    hits = [f"{p.relative_to(REPO)}:{i}: {line.strip()[:80]}"
            for folder in ("verifier", "data_pipeline", "eval", "training", "launch")
            for p in sorted((REPO / folder).rglob("*.py"))
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not hits, "issue numbers in library code:\n" + "\n".join(hits)
