"""API-key redaction: the one function that keeps secrets out of everything a run writes or prints
(``config.json``, ``metrics.json``, W&B, logs, process titles, error messages)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

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
