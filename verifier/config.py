"""Typed configs: dataclasses registered with Hydra and mirrored by YAML in ``configs/``.

Each command is a Hydra app whose schema is a dataclass; ``hydra_main(name, Schema)``
loads ``configs/<name>.yaml`` (which lists ``<name>_schema`` in its defaults),
validates overrides against the schema and hands the function a dataclass instance.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
T = TypeVar("T")


def register(name: str, schema: type) -> None:
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name=f"{name}_schema", node=schema)


def to_object(cfg: Any) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.to_object(cfg)


def hydra_main(name: str, schema: type[T], config_dir: Path | None = None
               ) -> Callable[[Callable[[T], Any]], Callable[[], Any]]:
    """Decorator: a Hydra app over ``configs/<name>.yaml`` typed by ``schema``.

    ``config_dir`` gives an app its own config folder, for apps whose plain fields
    share a name with a config group of ``configs/`` (``verifier.serve``'s ``model=DIR``
    vs the training ``model`` group).
    """
    import hydra

    register(name, schema)

    def deco(fn: Callable[[T], Any]) -> Callable[[], Any]:
        @hydra.main(config_path=str(config_dir or CONFIG_DIR), config_name=name, version_base="1.3")
        @functools.wraps(fn)
        def wrapped(cfg: Any) -> Any:
            # Hydra has parsed the command line: drop its API keys from sys.argv, which W&B records
            # as the run's program arguments (and other libraries may log)
            sys.argv[:] = redact(list(sys.argv))
            return fn(to_object(cfg))

        return wrapped

    return deco


def compose(name: str, schema: type[T], overrides: list[str] | None = None, config_dir: Path | None = None) -> T:
    """The same config as the command line would build, for tests and notebooks."""
    from hydra import compose as _compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register(name, schema)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir or CONFIG_DIR), version_base="1.3"):
        cfg = _compose(config_name=name, overrides=overrides or [])
    return to_object(cfg)


# ------------------------------------------------------------------------------------------- secrets

_SECRET_NAMES = r"(?:api_key|apikey|secret|password|access_token|auth_token|hf_token)"
SECRET_KEY = re.compile(_SECRET_NAMES + "$", re.IGNORECASE)
REDACTED = "***"
# ``a.api_key=VALUE`` and inline ``{api_key: VALUE, ...}`` in a command-line override
_SECRET_IN_TEXT = re.compile("(" + _SECRET_NAMES + r"['\"]?\s*[:=]\s*)(['\"]?)([^,}\]\s'\"]+)\2",
                             re.IGNORECASE)


def redact(obj: Any) -> Any:
    """A copy of a config (dataclass, mapping, list) with every secret-named field set to ``***``.

    For anything a run writes: ``config.json``, ``metrics.json``, W&B config and run name,
    logs. Override strings (``endpoint.api_key=KEY``, ``verifiers=[{api_key: KEY}]``) are
    redacted too.

    >>> redact({"endpoint": {"api_key": "sk-1", "model": "m"}, "overrides": ["endpoint.api_key=sk-1", "n=2"]})
    {'endpoint': {'api_key': '***', 'model': 'm'}, 'overrides': ['endpoint.api_key=***', 'n=2']}
    >>> redact(["verifiers=[{base_url: u, api_key: sk-1}]"]), redact({"api_key": None})
    (['verifiers=[{base_url: u, api_key: ***}]'], {'api_key': None})
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return redact(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {k: (REDACTED if isinstance(k, str) and SECRET_KEY.search(k) and v else redact(v))
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact(v) for v in obj)
    if isinstance(obj, str):
        return _SECRET_IN_TEXT.sub(lambda m: m.group(1) + m.group(2) + REDACTED + m.group(2), obj)
    return obj


def is_secret_override(override: str) -> bool:
    """An override that sets a secret (left out of run names).

    >>> is_secret_override("reward.endpoint.api_key=sk-1"), is_secret_override("grpo.beta=0.1")
    (True, False)
    """
    return redact(override) != override
