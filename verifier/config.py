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


def command_name(fn: Callable[..., Any]) -> str:
    """How the user started a command: ``data_pipeline.curate`` for ``python -m``, else the script path."""
    mod = fn.__module__
    if mod == "__main__":
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        return spec.name if spec is not None else (sys.argv[0] or "command")
    return mod


def hydra_main(name: str, schema: type[T], config_dir: Path | None = None
               ) -> Callable[[Callable[[T], Any]], Callable[[], Any]]:
    """Decorator: a Hydra app over ``configs/<name>.yaml`` typed by ``schema``.

    ``config_dir`` gives an app its own config folder, for apps whose plain fields
    share a name with a config group of ``configs/`` (``verifier.serve``'s ``model=DIR``
    vs the training ``model`` group).

    User errors (``verifier.errors``: bad record, missing file, config value, Hydra's unknown key or bad
    override) end the command with one message and exit code 2; ``HYDRA_FULL_ERROR=1`` adds the traceback.
    """
    import hydra

    from verifier.errors import EXIT_USER_ERROR, full_error, run_command

    register(name, schema)

    def deco(fn: Callable[[T], Any]) -> Callable[[], Any]:
        started = []

        @hydra.main(config_path=str(config_dir or CONFIG_DIR), config_name=name, version_base="1.3")
        @functools.wraps(fn)
        def wrapped(cfg: Any) -> Any:
            started.append(True)
            # Hydra has parsed the command line: drop its API keys from sys.argv, which W&B records
            # as the run's program arguments (and other libraries may log)
            sys.argv[:] = redact(list(sys.argv))
            return run_command(command_name(fn), lambda: fn(_typed(cfg)))

        @functools.wraps(fn)
        def entry(*args: Any, **kwargs: Any) -> Any:
            from hydra.errors import HydraException
            from omegaconf.errors import OmegaConfBaseException

            try:
                return wrapped(*args, **kwargs)
            except SystemExit as e:
                # Hydra printed its own error (unknown key, bad override value, missing config) and exits 1
                if e.code == 1 and not started:
                    raise SystemExit(EXIT_USER_ERROR) from None
                raise
            except (HydraException, OmegaConfBaseException):
                if started or not full_error():
                    raise
                import traceback

                traceback.print_exc()  # HYDRA_FULL_ERROR=1: Hydra re-raised its error for the traceback
                raise SystemExit(EXIT_USER_ERROR) from None

        return entry

    return deco


def _typed(cfg: Any) -> Any:
    """The dataclass of a composed config; a value the schema's own checks refuse is a user error.

    A ``ValueError`` here comes from a config dataclass's ``__post_init__`` check (``EndpointConfig`` ...).
    """
    from omegaconf.errors import OmegaConfBaseException

    from verifier.errors import InputError

    try:
        return to_object(cfg)
    except InputError:
        raise
    except (OmegaConfBaseException, ValueError) as e:
        raise InputError(" ".join(str(e).split("\n")[0].split())) from e


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
