"""Errors a user causes, and how every command reports them: one message, exit code 2.

``UserError`` is the base of every error whose cause is the user's input, not the code: a bad
record (``verifier.records.RecordError``, ``verifier.io.DatasetError``), a bad config value
(``InputError``), toy-scale values in a real run (``training.scale.ToyScaleError``), a ladder rule or
start-up check of a training run (``training.ladder.LadderConfigError``, ``training.preflight.PreflightError``),
a budget that cannot fit (``verifier.budget.BudgetError``), a judge endpoint that keeps failing
(``training.rewards.JudgeFailureError``), a prover run's hack audit over its threshold with ``action=stop``
(``training.prover_reward.RewardHackingError``), an output held by another process (subclass ``UserError``).
Missing files (``FileNotFoundError``) and Hydra's own errors (unknown override key, bad override
value) are treated the same way.

``run_command(prog, fn)`` is the one place that turns them into a message: every Hydra app goes through
it (``verifier.config.hydra_main``). It prints ``<prog>: error: <message>`` on stderr and exits with
``EXIT_USER_ERROR``; with ``HYDRA_FULL_ERROR=1`` the traceback is printed too. Any other exception
is a bug and keeps its traceback. Each class has an entry in ``docs/troubleshooting.md`` (meaning, message, fix).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from verifier.redaction import redact  # a message that quotes an override never shows a key

EXIT_USER_ERROR = 2
FULL_ERROR_ENV = "HYDRA_FULL_ERROR"
_FILE_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError)


class UserError(Exception):
    """An error the user caused and can fix; the message names the record, field, key or file."""

    def cli_message(self) -> str:
        """The message a command prints: one line (a message that lists several keys is joined with "; ")."""
        lines = [ln.strip() for ln in str(self).splitlines() if ln.strip()]
        return (lines[0] + " " + "; ".join(lines[1:])) if len(lines) > 1 else "".join(lines)


class InputError(UserError, ValueError):
    """A bad value in a config, a record or an input file (a ``ValueError`` as well)."""


def is_user_error(exc: BaseException) -> bool:
    return isinstance(exc, (UserError, *_FILE_ERRORS))


def message_of(exc: BaseException) -> str:
    if isinstance(exc, UserError):
        return exc.cli_message()
    if isinstance(exc, _FILE_ERRORS) and exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc) or type(exc).__name__


def full_error() -> bool:
    return os.environ.get(FULL_ERROR_ENV, "") not in ("", "0")


def report(prog: str, exc: BaseException) -> None:
    """Print a user error: the traceback only with ``HYDRA_FULL_ERROR=1``, then the one-line message."""
    if full_error():
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    else:
        print(f"{prog}: error: {redact(message_of(exc))}", file=sys.stderr, flush=True)


def run_command(prog: str, fn: Callable[[], Any]) -> Any:
    """Run a command's body; a user error exits with code 2 after one message (see the module docstring)."""
    try:
        return fn()
    except Exception as exc:  # only user errors are handled, the rest is re-raised as it is
        if not is_user_error(exc):
            raise
        report(prog, exc)
        raise SystemExit(EXIT_USER_ERROR) from None
