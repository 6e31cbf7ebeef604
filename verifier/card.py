"""The verifier card (``verifier_card.json``): how a trained verifier is to be judged, beside its weights.

Every training run of a verifier (``training/grpo.py``, ``training/sft.py``) writes it into its run directory
(``output_dir``, beside ``final/``): the prompt (template, reference solution or not), the token budgets (the
completion budget of training, the least budget the verifier needs, the held-out judge's), the sampling, thinking,
the reasoning parser, the name ``verifier.serve run_dir=DIR`` serves it under, and the model the run started from.

``python -m eval.verifierbench``, ``eval.proverbench`` and ``eval.judge`` take ``verifier_run_dir=DIR``: every
judge key not set on the command line comes from the card (:func:`inherit`, called by ``verifier.config`` through
the schema's ``resolve``); a key set on the command line that contradicts the card is a warning naming both values,
and a :class:`CardError` (exit 2) where the numbers would be meaningless: another prompt template, or a budget
below what the verifier needs (its passes would be cut, and pessimism rejects them).
``experiment=prover_rl`` (``training/grpo.py``) takes ``prover.verifier_run_dir=DIR`` the same way for its reward
judge (``prover.judge``, ``prover.verifier``; ``training.config.GRPORunConfig.resolve``, ``inherit(prefix=...)``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifier.errors import InputError
from verifier.serve import RUN_SERVED_NAME, ServeConfig, resolve_run_dir

CARD_FILE = "verifier_card.json"
CARD_VERSION = 1  # raise when a field changes meaning; a card of a newer version is refused


class CardError(InputError):
    """A verifier card that cannot be read, or a judge key that makes the card's verifier's numbers meaningless."""


@dataclass(frozen=True)
class VerifierCard:
    """The judge settings a verifier was trained with (``DIR/verifier_card.json``, schema :data:`CARD_VERSION`)."""

    recipe: str  # grpo | sft
    base_model: str  # the weights the run started from (init_from, else model.name_or_path)
    template: str  # verifier/prompts/<template>.j2: data.prompt_template
    with_reference: bool  # data.with_reference
    train_max_tokens: int  # the completion budget of training (GRPO: grpo.max_completion_length; SFT: its longest target)
    needed_max_tokens: int  # the least judge budget: the longest verification it finished in training
    judge_max_tokens: int | None  # the held-out judge's max_tokens (GRPO: eval.judge.max_tokens; SFT: none)
    temperature: float  # the held-out judge's sampling (SFT: section 5.1's 1.0)
    top_p: float
    thinking: bool | None  # thinks before its verification (None: whatever the chat template does)
    chat_template_kwargs: dict[str, Any] | None  # sent with every judge request (GRPO: grpo.chat_template_kwargs)
    reasoning_parser: str | None = None  # serve with --reasoning-parser (None: the thinking stays in the text)
    served_model_name: str = RUN_SERVED_NAME  # `python -m verifier.serve run_dir=DIR` serves it under this name
    schema_version: int = CARD_VERSION

    def judge_budget(self, default: int) -> int:
        """The judge's ``max_tokens`` from the card: the held-out judge's (else ``default``), raised to the need.

        >>> example_card(judge_max_tokens=None, needed_max_tokens=60).judge_budget(1024), example_card().judge_budget(1024)
        (1024, 8192)
        """
        return max(default if self.judge_max_tokens is None else self.judge_max_tokens, self.needed_max_tokens)


def example_card(**kw: Any) -> VerifierCard:
    """A card with plausible values (doctests and tests); ``kw`` replaces any field."""
    base = dict(recipe="grpo", base_model="m", template="verify", with_reference=False, train_max_tokens=4096,
                needed_max_tokens=700, judge_max_tokens=8192, temperature=1.0, top_p=1.0, thinking=False,
                chat_template_kwargs=None)
    return VerifierCard(**{**base, **kw})


_TYPES: dict[str, tuple[type, ...]] = {
    "recipe": (str,), "base_model": (str,), "template": (str,), "with_reference": (bool,),
    "train_max_tokens": (int,), "needed_max_tokens": (int,), "judge_max_tokens": (int, type(None)),
    "temperature": (int, float), "top_p": (int, float), "thinking": (bool, type(None)),
    "chat_template_kwargs": (dict, type(None)), "reasoning_parser": (str, type(None)),
    "served_model_name": (str,), "schema_version": (int,),
}


def write_card(run_dir: str | os.PathLike, c: VerifierCard) -> Path:
    """``run_dir/verifier_card.json``, written atomically; returns its path."""
    path = Path(run_dir) / CARD_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(c), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_card(run_dir: str | os.PathLike, key: str = "verifier_run_dir") -> VerifierCard:
    """The validated card of a run directory; a :class:`CardError` names the file and the field (``key``: the
    command's key that named the directory)."""
    path = Path(run_dir) / CARD_FILE
    if not path.exists():
        raise CardError(f"{key}={run_dir}: no {CARD_FILE} there (a training run writes it beside final/; "
                        f"a run from before the card: write one with verifier.card.write_card, or leave out "
                        f"{key} and set the judge keys yourself)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise CardError(f"{path}: not JSON ({e})") from e
    return validate(doc, str(path))


def validate(doc: Any, where: str = CARD_FILE) -> VerifierCard:
    """A card from its JSON object, every field checked.

    >>> validate({**dataclasses.asdict(example_card()), "needed_max_tokens": "700"}, "c.json")
    Traceback (most recent call last):
    ...
    verifier.card.CardError: c.json, field 'needed_max_tokens': expected int, got '700'
    >>> validate({**dataclasses.asdict(example_card()), "schema_version": 2}, "c.json")
    Traceback (most recent call last):
    ...
    verifier.card.CardError: c.json, field 'schema_version': version 2 is newer than this code reads (1); update the code
    """
    if not isinstance(doc, dict):
        raise CardError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CardError(f"{where}, field 'schema_version': expected a version >= 1, got {version!r}")
    if version > CARD_VERSION:
        raise CardError(f"{where}, field 'schema_version': version {version} is newer than this code reads "
                        f"({CARD_VERSION}); update the code")
    names = [f.name for f in dataclasses.fields(VerifierCard)]
    for name in names:
        if name not in doc:
            if name in ("reasoning_parser", "served_model_name"):
                continue  # defaults
            raise CardError(f"{where}, field {name!r}: missing")
        v, types = doc[name], _TYPES[name]
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            want = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise CardError(f"{where}, field {name!r}: expected {want}, got {v!r}")
    c = VerifierCard(**{k: doc[k] for k in names if k in doc})
    for name in ("train_max_tokens", "needed_max_tokens", "judge_max_tokens"):
        v = getattr(c, name)
        if v is not None and v < 1:
            raise CardError(f"{where}, field {name!r}: must be >= 1, got {v}")
    return c


# ------------------------------------------------------------------------ a command's judge keys from the card


def given(keys: frozenset[str] | set[str], key: str) -> bool:
    """``key`` is set on the command line (itself or a parent: ``judge={...}`` sets ``judge.max_tokens``).

    >>> given({"judge.max_tokens", "verifier"}, "judge.max_tokens"), given({"verifier"}, "verifier.model")
    (True, True)
    >>> given({"judge.n"}, "judge.max_tokens")
    False
    """
    parts = key.split(".")
    return any(".".join(parts[:i]) in keys for i in range(1, len(parts) + 1))


def inherit(cfg: Any, keys: frozenset[str] | set[str], endpoint: str, offline: str | None = None,
            prefix: str = "") -> Any:
    """``cfg`` with the card of ``cfg.verifier_run_dir`` filling every judge key not in ``keys`` (the command line).

    Inherited: ``judge.template``, ``judge.with_reference``, ``judge.max_tokens`` (:meth:`VerifierCard.judge_budget`),
    ``judge.temperature``, ``judge.top_p``; the endpoint's (``endpoint`` names it) ``model`` (the served name) and
    ``chat_template_kwargs``; with ``engine=offline`` the ``offline`` config's ``model`` (the run's final weights).
    A key given that differs from the card is a warning on stderr naming both values; another ``judge.template``, or
    a budget (``judge.max_tokens``, or the endpoint's ``max_tokens``, which overrides it) below the card's
    ``needed_max_tokens`` is a :class:`CardError`. A note lists what the card set.

    ``prefix``: where ``cfg`` sits in the command's config (``"prover."``: ``experiment=prover_rl``'s reward judge,
    ``prover.verifier_run_dir=DIR``); the keys looked up in ``keys`` and named in every message carry it.
    """
    run_dir = getattr(cfg, "verifier_run_dir", None)
    if not run_dir:
        return cfg
    P = prefix
    c = read_card(run_dir, key=f"{P}verifier_run_dir")
    src = str(Path(run_dir) / CARD_FILE)
    j, ep = cfg.judge, getattr(cfg, endpoint)
    ep_tokens = ep.max_tokens  # the endpoint's budget overrides the judge's (verifier.engine)
    budget_key, budget = ((f"{P}{endpoint}.max_tokens", ep_tokens) if ep_tokens is not None else
                          (f"{P}judge.max_tokens", j.max_tokens))
    if given(keys, f"{P}judge.template") and j.template != c.template:
        raise CardError(f"{P}judge.template={j.template} but the verifier was trained with {c.template} ({src}): "
                        f"its numbers under another prompt are not this verifier's; leave {P}judge.template out")
    if (ep_tokens is not None or given(keys, budget_key)) and budget < c.needed_max_tokens:
        raise CardError(f"{budget_key}={budget} is below the {c.needed_max_tokens} tokens the verifier needs ({src}: "
                        f"the longest verification it finished in training): its passes would be cut and rejected; "
                        f"leave {budget_key} out (the card's {c.judge_budget(j.max_tokens)})")
    warnings: list[str] = []
    if given(keys, f"{P}judge.max_tokens"):
        if j.max_tokens < c.train_max_tokens:
            warnings.append(f"{P}judge.max_tokens={j.max_tokens} but the verifier was trained with {c.train_max_tokens}")
        elif c.judge_max_tokens is not None and j.max_tokens != c.judge_max_tokens:
            warnings.append(f"{P}judge.max_tokens={j.max_tokens} but the verifier's held-out judge used "
                            f"{c.judge_max_tokens}")
    for key, mine, theirs in ((f"{P}judge.with_reference", j.with_reference, c.with_reference),
                              (f"{P}judge.temperature", j.temperature, c.temperature),
                              (f"{P}judge.top_p", j.top_p, c.top_p),
                              (f"{P}{endpoint}.chat_template_kwargs", ep.chat_template_kwargs, c.chat_template_kwargs)):
        if given(keys, key) and mine != theirs:
            warnings.append(f"{key}={_show(mine)} but the verifier was trained with {_show(theirs)}")
    for w in warnings:
        print(f"warning: {w} ({src})", file=sys.stderr, flush=True)

    judge_from = {"template": c.template, "with_reference": c.with_reference,
                  "max_tokens": c.judge_budget(j.max_tokens), "temperature": c.temperature, "top_p": c.top_p}
    judge_new = {k: v for k, v in judge_from.items() if not given(keys, f"{P}judge.{k}")}
    ep_from: dict[str, Any] = {"model": c.served_model_name}
    if c.chat_template_kwargs is not None:
        ep_from["chat_template_kwargs"] = dict(c.chat_template_kwargs)
    ep_new = {k: v for k, v in ep_from.items() if not given(keys, f"{P}{endpoint}.{k}")}
    out = dataclasses.replace(cfg, judge=dataclasses.replace(j, **judge_new),
                              **{endpoint: dataclasses.replace(ep, **ep_new)})
    set_ = [f"{P}judge.{k}={_show(v)}" for k, v in judge_new.items()] + [f"{P}{endpoint}.{k}={_show(v)}"
                                                                          for k, v in ep_new.items()]
    if offline and getattr(cfg, "engine", None) == "offline" and not given(keys, f"{P}{offline}.model"):
        try:
            weights = resolve_run_dir(ServeConfig(run_dir=str(run_dir))).model
        except ValueError as e:
            raise CardError(str(e).replace("run_dir=", f"{P}verifier_run_dir=", 1)) from e
        out = dataclasses.replace(out, **{offline: dataclasses.replace(getattr(out, offline), model=str(weights))})
        set_.append(f"{offline}.model={weights}")
    serve = f"; serve it with --reasoning-parser {c.reasoning_parser}" if c.reasoning_parser else ""
    print(f"note: {src} sets {' '.join(set_) or 'nothing'} (the judge keys not on the command line){serve}",
          file=sys.stderr, flush=True)
    return out


def _show(v: Any) -> str:
    """A value as an override writes it.

    >>> _show(True), _show(None), _show({"enable_thinking": False}), _show(0.5)
    ('true', 'null', '{enable_thinking: false}', '0.5')
    """
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_show(x)}" for k, x in v.items()) + "}"
    return str(v)
