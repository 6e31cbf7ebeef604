"""Typed configs: dataclasses registered with Hydra and mirrored by YAML in ``configs/``.

The shared config of each concept has its home here (one class per concept, every command uses it):
``EndpointConfig`` (a server, or several of one model, its key and budgets: what ``verifier.engine.OpenAIEngine``
talks to), ``Sampling`` (temperature, top_p, max_tokens, stop: what every engine samples with, inherited by every
generating command's config), ``JudgeConfig`` (how each proof is judged: passes, aggregation policy, template,
sampling), ``MetaVerifierConfig`` (which meta-verifier grades a verification; built by
``verifier.meta_verifier.make_meta_verifier``).
Bootstrap: ``eval.stats.BootstrapSpec``; W&B: ``verifier.results.WandbConfig``. A schema's ``RENAMED``
maps a key that moved to its new name (or names): the old key on the command line keeps working
(``renamed``: a note names the new key); in a YAML file it fails with one error naming the new key
(``renamed_key_message``).

Each command is a Hydra app whose schema is a dataclass; ``hydra_main(name, Schema)``
loads ``configs/<name>.yaml`` (which lists ``<name>_schema`` in its defaults),
validates overrides against the schema and hands the function a dataclass instance. Its ``--help`` lists
the config groups that command composes (``config_groups``), not every group of ``configs/``; every key is
in ``docs/reference.md`` (``python -m launch.reference``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys
import traceback
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

import hydra
import setproctitle
from hydra import compose as _compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verifier.aggregate import AggregationPolicy
from verifier.errors import EXIT_USER_ERROR, InputError, full_error, run_command
from verifier.redaction import redact

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
T = TypeVar("T")


DEFAULT_KEY_ENV = "VERIFIER_API_KEY"  # EndpointConfig.api_key_env's default (then $OPENAI_API_KEY)

# the values vLLM's OpenAI server accepts (gpt-oss: low | medium | high; "none" turns thinking off)
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


@dataclass
class EndpointConfig:
    """An OpenAI-compatible endpoint (a vLLM server, or any provider), or several servers of one model.

    ``base_url`` is one URL or a list of URLs (``endpoint.base_url=[URL1,URL2]`` on the command
    line): requests are spread over the servers (least loaded first), see
    ``verifier.engine.OpenAIEngine``.
    """

    base_url: Any = "http://127.0.0.1:8000/v1"  # str, or a list of servers serving the same model
    # The key: from the environment variable named by api_key_env (keys on the command line are visible
    # to every user of the machine in the process list; docs/operations.md). The default variable falls
    # back to $OPENAI_API_KEY, then "EMPTY" (a local vLLM server without --api-key); a variable you name
    # must be set. api_key=KEY still works (verifier.config.keys_out_of_argv moves it to the environment).
    api_key: str | None = None
    api_key_env: str = DEFAULT_KEY_ENV
    model: str = "artifacts/tiny-model"
    max_concurrency: int = 64  # requests in flight per server
    timeout_s: float = 600.0
    # the OpenAI SDK's retries per server (backoff 0.5 s doubling up to 8 s, minus 0-25 % jitter;
    # a server's Retry-After is honoured) on connection errors, timeouts, 408/409/429 and 5xx
    max_retries: int = 4
    revive_after_s: float = 30.0  # a server taken out (connection failures) is tried again after this
    # dict sent with each request, e.g. {"structured_outputs": {"regex": ...}}; Any so that a
    # command-line override `endpoint.extra_body={...}` assigns a dict (no `+` needed).
    extra_body: Any = None
    # Reasoning models: the per-request output budget (None: the caller's sampling.max_tokens),
    # reasoning effort (gpt-oss: low | medium | high; None: the server's default) and chat-template
    # arguments (e.g. {enable_thinking: false} for Qwen3), sent with every request.
    max_tokens: int | None = None
    reasoning_effort: str | None = None
    chat_template_kwargs: Any = None

    def __post_init__(self) -> None:
        self.urls  # noqa: B018 - validates base_url
        if not self.api_key:
            self.resolved_api_key()  # a named variable that is not set: an error before any work
        if int(self.max_concurrency) < 1:
            raise ValueError(f"endpoint {self.model!r}: max_concurrency must be >= 1, got {self.max_concurrency}")
        if int(self.max_retries) < 0:
            raise ValueError(f"endpoint {self.model!r}: max_retries must be >= 0, got {self.max_retries}")
        if self.max_tokens is not None and int(self.max_tokens) < 1:
            raise ValueError(f"endpoint {self.model!r}: max_tokens must be >= 1 or null, got {self.max_tokens}")
        if self.reasoning_effort not in (None, *REASONING_EFFORTS):
            raise ValueError(f"endpoint {self.model!r}: reasoning_effort must be one of {', '.join(REASONING_EFFORTS)} "
                             f"or null, got {self.reasoning_effort!r}")
        if self.chat_template_kwargs is not None and not isinstance(self.chat_template_kwargs, dict):
            raise ValueError(f"endpoint {self.model!r}: chat_template_kwargs must be a mapping, "
                             f"got {type(self.chat_template_kwargs).__name__}")

    @property
    def urls(self) -> list[str]:
        """The server URLs (one for a plain endpoint); a clear error for an empty or repeated list.

        >>> EndpointConfig(base_url=["http://a:1/v1", "http://b:2/v1"]).urls
        ['http://a:1/v1', 'http://b:2/v1']
        """
        raw = self.base_url
        urls = [raw] if isinstance(raw, str) else list(raw) if isinstance(raw, (list, tuple)) else None
        if not urls or not all(isinstance(u, str) and u.strip() for u in urls):
            raise ValueError(f"endpoint {self.model!r}: base_url must be a URL or a non-empty list of URLs, "
                             f"got {raw!r}")
        urls = [u.strip() for u in urls]
        if len(set(urls)) != len(urls):
            raise ValueError(f"endpoint {self.model!r}: base_url lists a server twice: {urls}")
        return urls

    def request_options(self) -> dict[str, Any]:
        """The reasoning options that change samples (for cache keys and run records)."""
        out: dict[str, Any] = {}
        if self.max_tokens is not None:
            out["max_tokens"] = int(self.max_tokens)
        if self.reasoning_effort is not None:
            out["reasoning_effort"] = self.reasoning_effort
        if self.chat_template_kwargs:
            out["chat_template_kwargs"] = dict(self.chat_template_kwargs)
        return out

    def resolved_api_key(self) -> str:
        """``api_key``, else ``$<api_key_env>``; the default variable falls back to ``$OPENAI_API_KEY``, then "EMPTY".

        >>> EndpointConfig(api_key_env="NO_SUCH_VAR_FOR_DOCTEST")
        Traceback (most recent call last):
        ...
        ValueError: endpoint 'artifacts/tiny-model': api_key_env=NO_SUCH_VAR_FOR_DOCTEST names an environment variable that is not set (export NO_SUCH_VAR_FOR_DOCTEST=KEY, or leave api_key_env at its default VERIFIER_API_KEY)
        """
        if self.api_key:
            return self.api_key
        name = self.api_key_env or DEFAULT_KEY_ENV
        if os.environ.get(name):
            return os.environ[name]
        if name != DEFAULT_KEY_ENV:
            raise ValueError(f"endpoint {self.model!r}: api_key_env={name} names an environment variable that is not "
                             f"set (export {name}=KEY, or leave api_key_env at its default {DEFAULT_KEY_ENV})")
        return os.environ.get("OPENAI_API_KEY") or "EMPTY"

    def __repr__(self) -> str:  # never print the key
        return f"EndpointConfig(base_url={self.base_url!r}, model={self.model!r}, api_key=***)"


@dataclass
class Sampling:
    """The one sampling config: what every engine takes (``verifier.engine.Engine.generate``) and the sampling
    keys of every generating command: the judge (``judge.*``), the prover (``generation.*``,
    ``verifier.generation.GenerationConfig``), the critic (``critic.*``); inherited by those configs.
    ``sampling()`` is the sampling alone (no other key of the inheriting config)."""

    temperature: float = 1.0  # section 5.1: 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    stop: list[str] = field(default_factory=list)  # stop strings (none: the end of turn only)

    def sampling(self) -> Sampling:
        return Sampling(temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens,
                        stop=list(self.stop))


@dataclass
class JudgeConfig(Sampling):
    """How each proof is judged (mirrored by ``judge:`` in ``configs/judge.yaml``; sampling: :class:`Sampling`)."""

    n: int = 8  # passes per proof (section 4.4: 8)
    policy: str = "pessimistic"  # pessimistic | k_of_n | majority
    k: int | None = None  # k_of_n only (TCS-Bench: 3 of 4)
    unparseable: str = "reject"  # reject | ignore (always counted)
    step_rule: str = "earliest"  # a rejection's step: earliest | most_named (verifier.aggregate)
    early_stop: bool = False
    waves: list[int] = field(default_factory=lambda: [1, 1, 2, 4])  # pass counts per wave
    run_seed: int = 0
    with_reference: bool = True
    template: str = "verify"
    max_concurrency: int = 256  # trajectories in flight (requests are bounded by the engine)
    model: str | None = None  # override the engine's model (e.g. a LoRA adapter name)
    # template judges (eval.judges: IneqMath, TCS-Bench, ProofJudge): how a sample is read
    parser: str = "verification"  # verification | verifier.parser.parse_<parser> | none (raw text)
    structured: bool = False  # vLLM structured outputs with eval.judges.answer_regex(parser)
    regex: str | None = None  # explicit structured-output regex (overrides ``structured``)
    rationale_chars: int = 24  # structured outputs: length of the free rationale before the answer block

    def aggregation(self) -> AggregationPolicy:
        return AggregationPolicy(kind=self.policy, n=self.n, k=self.k, unparseable=self.unparseable,  # type: ignore[arg-type]
                                 step_rule=self.step_rule)  # type: ignore[arg-type]


@dataclass
class MetaVerifierConfig:
    """Which meta-verifier grades a verification against the expert annotation (sections 3.3, 4.3).

    ``eval.verifierbench``'s ``meta.*``; the GRPO reward's meta-verifier ``reward.meta.*`` is this config too
    (``training.rewards.RewardConfig.meta``), and the held-out evaluation grades with it. The expert-free
    labeller's ``meta.*`` (``data_pipeline.autolabel``) grades without an annotation (``template``).
    """

    kind: str = "rule"  # rule | llm (section 3.3: gpt-oss-120b in the paper)
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)  # llm: its own server
    temperature: float = 0.0
    max_tokens: int = 2048  # the judge's budget when endpoint.max_tokens is null (reasoning judges: set that)
    run_seed: int = 0
    near: int = 1  # rule: a first error step within this many steps is a BASIC_MATCH
    show_reasoning: bool = False  # llm: also show the verifier's private reasoning (B.3: rationale and verdict only)
    template: str = "meta_verify"  # llm: B.3 against the annotation; meta_verify_analysis: without one (autolabel)


def register(name: str, schema: type) -> None:
    ConfigStore.instance().store(name=f"{name}_schema", node=schema)


# ``--help``: the config groups this command composes (Hydra's default help lists every group of configs/)
HELP = "command"  # hydra/help=command, added to a command line with --help
_HELP_TEMPLATE = """${hydra.help.app_name}: every key, its type, default and meaning in docs/reference.md

== Config groups ==
This command's groups, group=option: the option chosen (by default or on the command line), then every option

${verifier_config_groups:}

== Config ==
Override anything in the config (foo.bar=value)

$CONFIG

Use --hydra-help to view Hydra specific help
"""


def config_groups(choices: Any, loader: Any) -> list[str]:
    """One line per config group a composed config chose (``hydra.runtime.choices``, Hydra's own left out):
    ``group: chosen (options: a, b)``; ``loader`` is Hydra's config loader, which lists a group's options."""
    out = []
    for g, c in sorted(choices.items()):
        if c is None or g.startswith("hydra"):
            continue
        options = sorted(loader.get_group_options(g.partition("@")[0]))
        chosen = c if c in options else f"{c} (optional: no such option, nothing read)"
        out.append(f"{g}: {chosen} (options: {', '.join(options)})")
    return out


def _help_groups() -> str:
    lines = config_groups(HydraConfig.get().runtime.choices, GlobalHydra.instance().config_loader())
    return "\n".join(lines) or "(none: every key is set directly)"


def _register_help() -> None:
    OmegaConf.register_new_resolver("verifier_config_groups", _help_groups, replace=True)
    ConfigStore.instance().store(group="hydra/help", name=HELP, node={
        "app_name": "${hydra.job.name}", "header": "", "footer": "", "template": _HELP_TEMPLATE})


def _with_help(args: list[str]) -> list[str]:
    """``--help`` shows this command's config groups only (``hydra/help=command``), unless a help config is given.

    >>> _with_help(["--help", "judge.n=4"]), _with_help(["judge.n=4"]), _with_help(["-h", "hydra/help=default"])
    (['--help', 'judge.n=4', 'hydra/help=command'], ['judge.n=4'], ['-h', 'hydra/help=default'])
    """
    if not {"--help", "-h"} & set(args) or any(a.startswith("hydra/help=") for a in args):
        return args
    return [*args, f"hydra/help={HELP}"]


def to_object(cfg: Any) -> Any:
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

    register(name, schema)
    _register_help()

    def deco(fn: Callable[[T], Any]) -> Callable[[], Any]:
        started = []

        @hydra.main(config_path=str(config_dir or CONFIG_DIR), config_name=name, version_base="1.3")
        @functools.wraps(fn)
        def wrapped(cfg: Any) -> Any:
            started.append(True)
            _stop_recording()
            # Hydra has parsed the command line: drop its API keys from sys.argv, which W&B records
            # as the run's program arguments (and other libraries may log)
            sys.argv[:] = redact(list(sys.argv))
            return run_command(command_name(fn), lambda: fn(resolved(_typed(cfg), _task_overrides())))

        @functools.wraps(fn)
        def entry(*args: Any, **kwargs: Any) -> Any:
            # before Hydra sees the command line: endpoint keys move to the environment, so no
            # saved config (multirun.yaml, .hydra/), submitit pickle, log or run name gets them
            given = renamed(schema, sys.argv[1:])  # an old key under its new name
            argv = keys_out_of_argv(schema, given)
            if argv != given or redact(argv) != argv:
                _retitle(argv)
            sys.argv[1:] = _with_help(argv)
            record = _StderrRecord(sys.stderr)  # Hydra's composition error, to name a renamed key's new name
            sys.stderr = record
            try:
                return wrapped(*args, **kwargs)
            except SystemExit as e:
                # Hydra printed its own error (unknown key, bad override value, missing config) and exits 1
                if e.code == 1 and not started:
                    _stop_recording()
                    if (msg := _renamed_in_error(schema, Exception(record.text))) is not None:
                        print(f"{command_name(fn)}: error: {msg}", file=sys.stderr, flush=True)
                    raise SystemExit(EXIT_USER_ERROR) from None
                raise
            except (HydraException, OmegaConfBaseException):
                _stop_recording()
                if started or not full_error():
                    raise

                traceback.print_exc()  # HYDRA_FULL_ERROR=1: Hydra re-raised its error for the traceback
                if (msg := _renamed_in_error(schema, sys.exc_info()[1])) is not None:
                    print(f"{command_name(fn)}: error: {msg}", file=sys.stderr, flush=True)
                raise SystemExit(EXIT_USER_ERROR) from None
            finally:
                _stop_recording()

        return entry

    return deco


class _StderrRecord:
    """``sys.stderr`` while Hydra composes a command's config: writes go through and are kept (the last 64 kB)."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.text = stream, ""

    def write(self, text: str) -> int:
        self.text = (self.text + text)[-65536:]
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _stop_recording() -> None:
    while isinstance(sys.stderr, _StderrRecord):
        sys.stderr = sys.stderr.stream


def _typed(cfg: Any) -> Any:
    """The dataclass of a composed config; a value the schema's own checks refuse is a user error.

    A ``ValueError`` here comes from a config dataclass's ``__post_init__`` check (``EndpointConfig`` ...).
    """

    try:
        return to_object(cfg)
    except InputError:
        raise
    except (OmegaConfBaseException, ValueError) as e:
        raise InputError(" ".join(str(e).split("\n")[0].split())) from e


def compose(name: str, schema: type[T], overrides: list[str] | None = None, config_dir: Path | None = None) -> T:
    """The same config as the command line would build, for tests and notebooks."""

    register(name, schema)
    GlobalHydra.instance().clear()
    overrides = renamed(schema, overrides or [])
    with initialize_config_dir(config_dir=str(config_dir or CONFIG_DIR), version_base="1.3"):
        try:
            cfg = _compose(config_name=name, overrides=overrides)
        except (HydraException, OmegaConfBaseException) as e:
            if (msg := _renamed_in_error(schema, e)) is not None:
                raise InputError(msg) from e
            raise
    return resolved(to_object(cfg), overrides)


def given_keys(overrides: list[str]) -> frozenset[str]:
    """The dotted keys a list of overrides sets (``+k=v``, ``~k``, a sweep's ``k=a,b``).

    >>> sorted(given_keys(["judge.max_tokens=1024", "+endpoint.extra_body={a: 1}", "~judge.k", "-m"]))
    ['endpoint.extra_body', 'judge.k', 'judge.max_tokens']
    """
    return frozenset(a.partition("=")[0].lstrip("+~") for a in overrides if not a.startswith("-"))


def resolved(obj: T, overrides: list[str]) -> T:
    """A typed config after its schema's ``resolve(given)``, if it has one: the keys set on the command line
    (``given_keys``) decide which values may come from elsewhere (the verifier card: ``verifier.card.inherit``)."""
    hook = getattr(obj, "resolve", None)
    return hook(given_keys(overrides)) if callable(hook) else obj


def _task_overrides() -> list[str]:
    """The overrides of the running Hydra job (one job of a sweep: its own values)."""
    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:  # not under a Hydra app
        return []


def renamed(schema: type, args: list[str]) -> list[str]:
    """Overrides with every renamed key (``schema.RENAMED``: old dotted key -> new) under its new name.

    An old key in a script keeps working; a note on stderr names the new key.

    >>> class ScoreConfig:  # eval.score's
    ...     RENAMED = {"bootstrap_n": "bootstrap.n", "ci_level": "bootstrap.level"}
    >>> renamed(ScoreConfig, ["bootstrap_n=20", "gold=g.jsonl", "+ci_level=0.9"])
    ['bootstrap.n=20', 'gold=g.jsonl', '+bootstrap.level=0.9']
    """
    out = []
    for arg in args:
        head, sep, value = arg.partition("=")
        key = head.lstrip("+~")
        news = _new_names(schema, key) if sep else None
        if news:
            shown = "***" if redact(f"{key}={value}") != f"{key}={value}" else value  # an API key: never printed
            read = " and ".join(f"{new}={shown}" for new in news)
            print(f"note: {key} is now {' and '.join(news)} ({key}={shown} was read as {read})", file=sys.stderr,
                  flush=True)
            out += [f"{head[: len(head) - len(key)]}{new}={value}" for new in news]
        else:
            out.append(arg)
    return out


def _renamed_in_error(schema: type, exc: BaseException) -> str | None:
    """:func:`renamed_key_message` of a key a composition error names (the ``full_key: ...`` of its message
    or of a cause: OmegaConf drops the cause unless ``OC_CAUSE=1``)."""
    cause: BaseException | None = exc
    while cause is not None:
        for key in [getattr(cause, "full_key", None) or "", *re.findall(r"full_key: (\S+)", str(cause))]:
            if (msg := renamed_key_message(schema, key)) is not None:
                return msg
        cause = cause.__cause__
    return None


def _new_names(schema: type, key: str) -> tuple[str, ...] | None:
    """The new name(s) of ``key`` (``schema.RENAMED``), or None. A renamed group renames the keys under it
    (``reward.endpoint`` -> ``reward.meta.endpoint``: ``reward.endpoint.base_url`` -> ``reward.meta.endpoint.base_url``).

    >>> class Run:
    ...     RENAMED = {"reward.endpoint": "reward.meta.endpoint", "eval.seed": ("eval.judge.run_seed", "eval.bootstrap.seed")}
    >>> _new_names(Run, "reward.endpoint.base_url"), _new_names(Run, "eval.seed"), _new_names(Run, "reward.endpoints")
    (('reward.meta.endpoint.base_url',), ('eval.judge.run_seed', 'eval.bootstrap.seed'), None)
    """
    table: dict[str, str | tuple[str, ...]] = getattr(schema, "RENAMED", {})
    for old, new in table.items():
        if key == old or key.startswith(old + "."):
            return tuple(n + key[len(old):] for n in ((new,) if isinstance(new, str) else new))
    return None


def renamed_key_message(schema: type, key: str) -> str | None:
    """The error of a renamed key (``schema.RENAMED``) found in a YAML file, or None for any other key.

    On the command line an old key keeps working (:func:`renamed`); in a config file it is an error
    that names the new key, since the schema no longer has the old one.

    >>> class Run:
    ...     RENAMED = {"eval.n_passes": "eval.judge.n", "eval.seed": ("eval.judge.run_seed", "eval.bootstrap.seed")}
    >>> renamed_key_message(Run, "eval.seed")
    'eval.seed is now eval.judge.run_seed and eval.bootstrap.seed: rename it in the config file (renamed keys are read under their new names only on the command line)'
    >>> renamed_key_message(Run, "eval.bogus") is None
    True
    """
    news = _new_names(schema, key)
    if not news:
        return None
    return (f"{key} is now {' and '.join(news)}: rename it in the config file (renamed keys "
            f"are read under their new names only on the command line)")


def is_secret_override(override: str) -> bool:
    """An override that sets a secret (left out of run names).

    >>> is_secret_override("reward.endpoint.api_key=sk-1"), is_secret_override("grpo.beta=0.1")
    (True, False)
    >>> is_secret_override("reward.endpoint.api_key_env=VERIFIER_ARGV_KEY_1")  # a key moved off the command line
    True
    """
    return redact(override) != override or ARGV_KEY_ENV.format("") in override


# ------------------------------------------------------------------------ keys out of the command line

ARGV_KEY_ENV = "VERIFIER_ARGV_KEY_{}"  # where keys given on the command line are moved
_INLINE_KEY = re.compile(r"(?<![\w.])(['\"]?)api_key\1(\s*:\s*)(['\"]?)([^,}\]\s'\"]+)\3")
PS_WARNING = ("warning: {what} puts an API key on the command line, where every user of this machine can read it "
              "(ps, /proc/PID/cmdline). It is written nowhere; next time {instead}. See docs/operations.md.")
_INSTEAD_ENV = ("export it and pass the variable's name: {where}api_key_env=NAME (default $VERIFIER_API_KEY, then "
                "$OPENAI_API_KEY)")


def _field_type(t: Any, name: str) -> Any:
    """The type of field ``name`` of dataclass ``t`` (Optional and list unwrapped), or None."""
    if not (dataclasses.is_dataclass(t) and isinstance(t, type)):
        return None
    if name not in {f.name for f in dataclasses.fields(t)}:
        return None
    try:
        ft = typing.get_type_hints(t)[name]
    except Exception:  # noqa: BLE001 - an unresolvable annotation: not a known endpoint
        return None
    while typing.get_origin(ft) in (typing.Union, types.UnionType, list, tuple):
        args = [a for a in typing.get_args(ft) if a is not type(None) and a is not Ellipsis]
        if len(args) != 1:
            return None
        ft = args[0]
    return ft


def _holds_key_env(schema: type, path: list[str]) -> bool:
    """True when ``path`` (dotted override key, list indices allowed) leads to a dataclass with ``api_key_env``."""
    t: Any = schema
    for part in path:
        if part.isdigit():  # verifiers.0.base_url: the list's element type is already unwrapped
            continue
        t = _field_type(t, part)
        if t is None:
            return False
    return dataclasses.is_dataclass(t) and "api_key_env" in {f.name for f in dataclasses.fields(t)}


def _retitle(args: list[str]) -> None:
    """Overwrite this process's command line (``ps``, ``/proc/PID/cmdline``) with the key-free one, so a
    key given as an override is visible only while the process starts (``setproctitle``)."""
    n = len(sys.argv) - 1  # the interpreter and its options (python -m eval.judge) stay as they were
    head = list(getattr(sys, "orig_argv", sys.argv))
    head = head[: len(head) - n] if n else head
    setproctitle.setproctitle(" ".join(redact([*head, *args])))


def keys_out_of_argv(schema: type, args: list[str], environ: Any = None) -> list[str]:
    """Move endpoint API keys from command-line overrides to environment variables.

    ``endpoint.api_key=KEY`` becomes ``endpoint.api_key_env=VERIFIER_ARGV_KEY_1`` with the key in
    ``$VERIFIER_ARGV_KEY_1``, and an inline ``verifiers=[{..., api_key: KEY}]`` becomes ``api_key_env:
    VERIFIER_ARGV_KEY_n``, so Hydra never holds the key: not in a sweep's ``multirun.yaml`` or any job's
    ``.hydra/``, not in submitit's job pickles (the jobs inherit the environment), not in W&B, logs or
    run names. Each one prints a warning: the key was visible in the process list. A key of a config
    without ``api_key_env`` (``verifier.serve api_key=KEY``) only gets the warning (``redact`` keeps it
    out of files).

    >>> from data_pipeline.augment import AugmentConfig  # generator: EndpointConfig, verifiers: list[...]
    >>> env = {}
    >>> keys_out_of_argv(AugmentConfig, ["generator.api_key=sk-1", "verifiers=[{base_url: u, api_key: sk-2}]",
    ...                                  "limit=2"], env)
    ['generator.api_key_env=VERIFIER_ARGV_KEY_1', 'verifiers=[{base_url: u, api_key_env: VERIFIER_ARGV_KEY_2}]', 'limit=2']
    >>> env, keys_out_of_argv(AugmentConfig, ["generator.api_key=null"], env)
    ({'VERIFIER_ARGV_KEY_1': 'sk-1', 'VERIFIER_ARGV_KEY_2': 'sk-2'}, ['generator.api_key=null'])
    """
    environ = os.environ if environ is None else environ
    out: list[str] = []
    n = 0

    def move(key: str) -> str:  # into the first free VERIFIER_ARGV_KEY_<n>
        nonlocal n
        n += 1
        while ARGV_KEY_ENV.format(n) in environ:
            n += 1
        environ[ARGV_KEY_ENV.format(n)] = key
        return ARGV_KEY_ENV.format(n)

    for arg in args:
        head, sep, value = arg.partition("=")
        if not sep or arg.startswith("-") or redact(arg) == arg:
            out.append(arg)
            continue
        path = head.lstrip("+~").split(".")
        key = value.strip().strip("'\"")
        if path[-1] == "api_key" and key in ("", "null"):  # no key given
            out.append(arg)
            continue
        where = ".".join(path[:-1]) + "." if len(path) > 1 else ""
        if path[-1] == "api_key" and _holds_key_env(schema, path[:-1]):
            out.append(f"{head.removesuffix('api_key')}api_key_env={move(key)}")
        elif _holds_key_env(schema, path) and _INLINE_KEY.search(value):
            value = _INLINE_KEY.sub(lambda m: f"api_key_env{m.group(2)}{move(m.group(4))}", value)
            out.append(f"{head}={value}")
            where = head.lstrip("+~") + "[i]."
        else:  # not an endpoint's key (verifier.serve): warned, and redact() keeps it out of files
            out.append(arg)
            where = None
        instead = _INSTEAD_ENV.format(where=where) if where is not None else "export it as $VERIFIER_API_KEY"
        print(PS_WARNING.format(what=redact(arg), instead=instead), file=sys.stderr, flush=True)
    return out
