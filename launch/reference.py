"""The config reference ``docs/reference.md``, generated from the commands' config dataclasses.

``python -m launch.reference > docs/reference.md`` (or ``--write``; ``--check`` exits 1 when the page is stale).

The commands are found in the source: every ``hydra_main("<name>", Schema)`` call in our packages (``ast``),
the schema imported where it is defined. One line per key: the dotted key (nested dataclasses expanded,
``key[]`` for the element of a list of dataclasses), its type, the schema's default, the value the command's
``configs/<name>.yaml`` gives when it differs, and the trailing ``# comment`` of the field's line in the source.
It lives on the top floor because it imports every command's schema (tests/test_layers.py).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import io
import re
import sys
import textwrap
import tokenize
import typing
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from verifier.config import CONFIG_DIR, config_groups, register

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("verifier", "data_pipeline", "eval", "training", "launch")
PAGE = REPO / "docs" / "reference.md"


@dataclass
class App:
    """One Hydra app: its config name, the module that runs it, its schema and config folder."""

    name: str
    module: str
    schema: type
    config_dir: Path

    @property
    def command(self) -> str:
        """How a user starts it: an entry script that puts the repository on ``sys.path`` is run by its path."""
        path = REPO / Path(*self.module.split(".")).with_suffix(".py")
        script = "sys.path" in path.read_text(encoding="utf-8")
        return f"python {path.relative_to(REPO).as_posix()}" if script else f"python -m {self.module}"

    @property
    def config_file(self) -> str:
        return (self.config_dir / f"{self.name}.yaml").relative_to(REPO).as_posix()


def _resolve(module: str, tree: ast.Module, name: str) -> Any:
    """``name`` as ``module`` sees it, importing only the module that defines it (not a heavy recipe)."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                if (a.asname or a.name) == name:
                    return getattr(importlib.import_module(node.module), a.name)
    return getattr(importlib.import_module(module), name)


def find_apps() -> list[App]:
    """Every ``hydra_main("<name>", Schema[, config_dir=DIR])`` of our packages, sorted by command."""
    apps = []
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None))
                        == "hydra_main" and len(node.args) >= 2 and isinstance(node.args[0], ast.Constant)
                        and isinstance(node.args[1], ast.Name)):
                    continue
                kw = {k.arg: k.value for k in node.keywords}
                folder = kw.get("config_dir", node.args[2] if len(node.args) > 2 else None)
                config_dir = _resolve(module, tree, folder.id) if isinstance(folder, ast.Name) else CONFIG_DIR
                apps.append(App(node.args[0].value, module, _resolve(module, tree, node.args[1].id),
                                Path(config_dir)))
    return sorted(apps, key=lambda a: a.command)


# ------------------------------------------------------------------------------------------------ one schema


@lru_cache(maxsize=None)
def comments(cls: type) -> dict[str, str]:
    """The trailing ``# comment`` of each field's line in ``cls``'s own source ({} when there is no source)."""
    try:
        src = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    by_line: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            by_line.setdefault(tok.start[0], tok.string.lstrip("#").strip())
    cdef = ast.parse(src).body[0]
    out = {}
    for node in getattr(cdef, "body", []):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            line = next((by_line[i] for i in range(node.lineno, (node.end_lineno or node.lineno) + 1)
                         if i in by_line), "")
            out[node.target.id] = line
    return out


def description(cls: type, name: str) -> str:
    """The comment of field ``name`` in the first class of ``cls``'s MRO that declares it."""
    for c in cls.__mro__:
        if name in c.__dict__.get("__annotations__", {}):
            return comments(c).get(name, "")
    return ""


def show(value: Any) -> str:
    """A value as it is written in an override.

    >>> show(None), show(True), show(""), show([1, 2]), show({"a": None}), show(1e-06)
    ('null', 'true', "''", '[1, 2]', '{a: null}', '1e-06')
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value if value else "''"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {show(v)}" for k, v in value.items()) + "}"
    if dataclasses.is_dataclass(value):
        return show(dataclasses.asdict(value))
    return getattr(value, "name", None) or str(value)  # an enum by its name, as OmegaConf writes it


def _type_name(f: dataclasses.Field) -> str:
    return f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))


def _element(hint: Any) -> type | None:
    """The dataclass of a ``list[DC]`` / ``DC | None`` field, or None."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if len(args) == 1 and dataclasses.is_dataclass(args[0]) else None


def keys(schema: type, instance: Any = None, prefix: str = "") -> list[tuple[str, str, Any, str]]:
    """(dotted key, type, default, description) of every leaf field of ``schema``, nested dataclasses expanded."""
    instance = schema() if instance is None else instance
    try:
        hints = typing.get_type_hints(schema)
    except NameError:  # a class defined in a function (tests): no list-element expansion
        hints = {}
    out = []
    for f in dataclasses.fields(schema):
        key, value, hint = prefix + f.name, getattr(instance, f.name), hints.get(f.name)
        if dataclasses.is_dataclass(value):
            out += keys(type(value), value, key + ".")
            continue
        if isinstance(value, dict) and value and all(dataclasses.is_dataclass(v) for v in value.values()):
            for name, v in value.items():  # named judges (step_judges.toy_case.n ...)
                out += keys(type(v), v, f"{key}.{name}.")
            continue
        out.append((key, _type_name(f), value, description(schema, f.name)))
        if (elem := _element(hint)) is not None:  # a list of endpoints ...: the fields of one element
            out += keys(elem, None, key + ("[]." if typing.get_origin(hint) is list else "."))
    return out


def composed(app: App) -> tuple[dict[str, Any], list[str]]:
    """The command's config as ``configs/<name>.yaml`` composes it (no override), flattened to dotted keys, and
    its config groups (``verifier.config.config_groups``, as ``--help`` shows them)."""
    register(app.name, app.schema)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(app.config_dir), version_base="1.3"):
        cfg = compose(config_name=app.name, return_hydra_config=True)
        groups = config_groups(cfg.hydra.runtime.choices, GlobalHydra.instance().config_loader())
    GlobalHydra.instance().clear()
    tree = OmegaConf.to_container(cfg, resolve=False)
    tree.pop("hydra", None)
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for k, v in node.items():
                walk(v, f"{prefix}{k}.")
        flat[prefix[:-1]] = node

    walk(tree, "")
    return flat, groups


# ------------------------------------------------------------------------------------------------ the page


def renamed_lines(table: dict[str, str | tuple[str, ...]]) -> list[str]:
    """A ``RENAMED`` table (``verifier.config.renamed``) as the page and CHANGELOG.md write it.

    >>> renamed_lines({"ci_level": "bootstrap.level", "eval.seed": ("eval.judge.run_seed", "eval.bootstrap.seed")})
    ['`ci_level` → `bootstrap.level`', '`eval.seed` → `eval.judge.run_seed` and `eval.bootstrap.seed`']
    """
    return [f"`{old}` → " + " and ".join(f"`{n}`" for n in ((new,) if isinstance(new, str) else new))
            for old, new in table.items()]


def anchor(app: App) -> str:
    """GitHub's anchor of the command's heading (``python -m eval.judge`` -> ``python--m-evaljudge``)."""
    return re.sub(r"[^\w\- ]", "", app.command.lower()).replace(" ", "-")


def section(app: App) -> list[str]:
    flat, groups = composed(app)
    doc = (inspect.getdoc(app.schema) or "").split("\n\n")[0].replace("\n", " ")
    out = [f"## `{app.command}`", "",
           f"Config `{app.config_file}`, schema `{app.schema.__module__}.{app.schema.__qualname__}`. {doc}".rstrip(),
           ""]
    if groups:
        out += ["Config groups (`group=option`; the default, then every option):", ""]
        out += [f"- `{g}`" for g in groups] + [""]
    for key, type_name, default, desc in keys(app.schema):
        line = f"- `{key}`: `{type_name}` = `{show(default)}`"
        if key in flat and show(flat[key]) != show(default):
            line += f" (config: `{show(flat[key])}`)"
        out.append(line + (f" — {desc}" if desc else ""))
    if renamed := renamed_lines(getattr(app.schema, "RENAMED", {})):
        out += ["", "Renamed keys (the old key still works on the command line; CHANGELOG.md):"]
        out += [f"- {line}" for line in renamed]
    return out + [""]


def page() -> str:
    """The whole of ``docs/reference.md``."""
    apps = find_apps()
    head = ["# Config reference", "",
            "Generated by `python -m launch.reference --write` from the commands' config dataclasses; "
            "`tests/test_reference.py` fails when this page differs from the code. One line per key: "
            "`key`: `type` = `schema default` (config: `the value configs/<name>.yaml and its default groups "
            "give`, when it differs) — the comment on the field's line. Any key is a `key=value` override; "
            "`key[]` is the element of a list (`'verifiers=[{base_url: URL}]'`).", "",
            "Commands: " + ", ".join(f"[`{a.command}`](#{anchor(a)})" for a in apps) + ".", ""]
    return "\n".join(head + [line for app in apps for line in section(app)]).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    text = page()
    if "--check" in argv:
        stale = not PAGE.exists() or PAGE.read_text(encoding="utf-8") != text
        print(f"{PAGE.relative_to(REPO)} is {'stale: python -m launch.reference --write' if stale else 'current'}")
        return int(stale)
    if "--write" in argv:
        PAGE.write_text(text, encoding="utf-8")
        print(f"wrote {PAGE.relative_to(REPO)}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
