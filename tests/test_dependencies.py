"""Library code imports only what ``pip install proofverifier`` installs (issue 14, item 8)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIBRARY = ("eval", "data_pipeline", "training", "verifier")
# the runtime extras: vLLM / DeepSpeed / GGUF are imported lazily where they serve or train
RUNTIME_EXTRAS = ("cpu", "gpu")


def _names(reqs: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].strip().lower().replace("_", "-") for r in reqs}


def test_library_imports_are_main_dependencies():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    allowed = _names(meta["dependencies"]) | {n for e in RUNTIME_EXTRAS
                                              for n in _names(meta["optional-dependencies"][e])}
    dists = packages_distributions()
    local = set(LIBRARY) | {"launch", "tests", "bench"}
    missing: dict[str, str] = {}
    for pkg in LIBRARY:
        for f in sorted((REPO / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    mods = [node.module]
                else:
                    continue
                for m in mods:
                    top = m.split(".")[0]
                    if top in sys.stdlib_module_names or top in local:
                        continue
                    for d in dists.get(top, [top]):
                        if d.lower().replace("_", "-") in allowed:
                            break
                    else:
                        missing.setdefault(top, str(f.relative_to(REPO)))
    assert not missing, f"imported by library code but not a main dependency in pyproject.toml: {missing}"
