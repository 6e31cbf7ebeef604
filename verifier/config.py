"""Typed configs: dataclasses registered with Hydra and mirrored by YAML in ``configs/``.

Each command is a Hydra app whose schema is a dataclass; ``hydra_main(name, Schema)``
loads ``configs/<name>.yaml`` (which lists ``<name>_schema`` in its defaults),
validates overrides against the schema and hands the function a dataclass instance.
"""

from __future__ import annotations

import functools
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
