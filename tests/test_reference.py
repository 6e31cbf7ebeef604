"""One reference: ``docs/reference.md`` is the generator's output (``launch.reference``), ``CHANGELOG.md`` lists
every renamed key, ``docs/troubleshooting.md`` has an entry per user error; ``--help`` shows the command's own
config groups."""

from __future__ import annotations

import ast
import difflib
import importlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from launch import reference

REPO = Path(__file__).resolve().parents[1]


def help_of(module: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", module, "--help", *args], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def groups_of(help_text: str) -> list[str]:
    """The lines of the help's config groups section."""
    section = re.split(r"== Config(?:uration)? groups ==", help_text)[1].split("== Config ==")[0]  # Hydra's: "uration"
    return [ln for ln in section.splitlines()[2:] if ln.strip()]


def test_help_lists_only_the_commands_own_config_groups():
    judge = help_of("eval.judge")  # before: every group of configs/ (experiment, model, profile, sft_profile ...)
    assert groups_of(judge) == ["judge: default (options: default)"], judge[:800]
    assert "docs/reference.md" in judge and "input: ???" in judge  # the composed config is still shown
    score = help_of("eval.score", "ci_level=0.9")  # no groups; overrides (a renamed key too) still apply
    assert groups_of(score) == ["(none: every key is set directly)"] and "level: 0.9" in score


# ------------------------------------------------------------------------------ docs/reference.md


@pytest.fixture(scope="module")
def apps():
    return reference.find_apps()


def test_reference_page_is_the_generators_output():
    """docs/reference.md cannot go stale: any changed key, type, default, comment or config value fails here."""
    page = reference.PAGE.read_text(encoding="utf-8")
    want = reference.page()
    diff = "\n".join(difflib.unified_diff(page.splitlines(), want.splitlines(), "docs/reference.md", "generated",
                                          lineterm="", n=0))
    assert page == want, f"docs/reference.md is stale: python -m launch.reference --write\n{diff[:3000]}"


def test_every_command_config_is_found(apps):
    """Every configs/**/<name>.yaml built on a schema (``<name>_schema`` in its defaults) is a command of the page,
    the GRPO and SFT recipes and the server (its own config folder) included."""
    configs = {p.stem for p in (REPO / "configs").rglob("*.yaml")
               if f"- {p.stem}_schema" in p.read_text(encoding="utf-8")}
    assert {a.name for a in apps} == configs
    by_name = {a.name: a for a in apps}
    assert by_name["grpo"].command == "python training/grpo.py" and by_name["sft"].command == "python training/sft.py"
    assert by_name["serve"].config_file == "configs/serving/serve.yaml"
    assert by_name["judge"].command == "python -m eval.judge"


def test_keys_types_defaults_and_comments():
    @dataclass
    class Inner:
        a: int = 1  # the a
        b: list[str] = field(default_factory=lambda: ["x"])

    @dataclass
    class Outer(Inner):
        inner: Inner = field(default_factory=lambda: Inner(a=2))  # a group
        c: str | None = None
        d: float = field(  # spread over lines
            default=0.5)

    assert reference.keys(Outer) == [("a", "int", 1, "the a"), ("b", "list[str]", ["x"], ""),
                                     ("inner.a", "int", 2, "the a"), ("inner.b", "list[str]", ["x"], ""),
                                     ("c", "str | None", None, ""), ("d", "float", 0.5, "spread over lines")]


# ------------------------------------------------------------------------------ CHANGELOG.md


def renamed_tables(apps) -> dict[str, dict]:
    """Every ``RENAMED`` table: each command schema's, and each module-level ``*RENAMED`` of the code base."""
    tables = {f"{a.command} ({a.schema.__name__}.RENAMED)": getattr(a.schema, "RENAMED") for a in apps
              if getattr(a.schema, "RENAMED", None)}
    for path in sorted(p for pkg in reference.PACKAGES for p in (REPO / pkg).rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for t in targets:
                if isinstance(t, ast.Name) and re.fullmatch(r"(\w+_)?RENAMED", t.id):
                    tables[f"{module}.{t.id}"] = getattr(importlib.import_module(module), t.id)
    return tables


def test_every_renamed_key_is_in_the_changelog(apps):
    log = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    tables = renamed_tables(apps)
    assert {"training.config.EVAL_RENAMED", "training.rewards.REWARD_RENAMED", "eval.tcs.RENAMED",
            "eval.stats.BOOTSTRAP_RENAMED"} <= set(tables), sorted(tables)
    missing = [f"{where}: {line}" for where, table in tables.items() for line in reference.renamed_lines(table)
               if f"- {line}" not in log]
    missing += [f"{a.command}: not named" for a in apps if getattr(a.schema, "RENAMED", None) and a.command not in log]
    assert not missing, "renamed keys missing from CHANGELOG.md:\n" + "\n".join(missing)


# ------------------------------------------------------------------------------ docs/troubleshooting.md


def user_error_classes() -> dict[str, str]:
    """Every class of the code base that derives from ``verifier.errors.UserError`` (by its bases' names, read with
    ``ast``, so nothing is imported), with the module that defines it; ``UserError`` itself included."""
    defs = [(node.name, [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases],
             ".".join(p.relative_to(REPO).with_suffix("").parts))
            for pkg in (*reference.PACKAGES, "bench") for p in sorted((REPO / pkg).rglob("*.py"))
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))) if isinstance(node, ast.ClassDef)]
    found = {"UserError": "verifier.errors"}
    while new := {name: mod for name, bases, mod in defs if name not in found and set(bases) & set(found)}:
        found.update(new)
    return found


def test_every_user_error_has_a_troubleshooting_entry():
    page = (REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    entries = dict(re.findall(r"^## `(\w+)`\n\n(.*?)(?=^## |\Z)", page, re.M | re.S))
    classes = user_error_classes()
    assert {"InputError", "RecordError", "DatasetError", "OutputLocked", "BudgetError", "CardError", "ToyScaleError",
            "PreflightError", "LadderConfigError", "JudgeFailureError", "RewardHackingError"} <= set(classes)
    missing = sorted(f"{mod}.{name}" for name, mod in classes.items() if name not in entries)
    assert not missing, f"user errors without an entry (## `Name`) in docs/troubleshooting.md: {missing}"
    for name, text in entries.items():  # what it means (its home first), a typical message, how to fix it
        assert name in classes, f"an entry for {name}, which is no UserError of the code"
        assert text.startswith(f"`{classes[name]}.{name}`") and "Fix:" in text, name
        assert name == "UserError" or "Message" in text, name
