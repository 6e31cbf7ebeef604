"""Problem identity: the one text normalisation, the one problem id, the one leak check.

Two records are about the same problem when they share a ``problem_id`` or when their problem
texts are equal after ``normalize_text`` (Unicode NFKC, whitespace collapsed). Every id derived
from a text is ``problem_id_of(text)``; every check that a training set does not leak a held-out
problem is ``ProblemIndex`` (``assert_disjoint`` raises, ``ProblemIndex.shared`` filters).
Duplicate detection (``data_pipeline.curate``) folds the same normalisation further
(``normalize_text(text, fold=True)``: case, LaTeX spacing, punctuation).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable
from typing import Protocol

from verifier.errors import InputError


class Problem(Protocol):
    """What identity reads of a record (``verifier.records.ProofTrajectory``; records imports this module)."""

    id: str
    problem_id: str
    problem: str


_LATEX_SPACING = re.compile(r"\\(?:[,;:! ]|quad|qquad|left|right|displaystyle|textstyle)")


def normalize_text(text: str, fold: bool = False) -> str:
    """The problem text as identity sees it: NFKC, whitespace collapsed; ``fold``: also lower case,
    no LaTeX spacing or ``$``, punctuation-light (duplicate detection).

    >>> normalize_text("Find  x. ") == normalize_text("Find x.")
    True
    >>> normalize_text("Prove  that $x^2\\\\geq 0$ for all real $x$.", fold=True) == normalize_text(
    ...     "prove that x^2\\\\geq 0 for all real x", fold=True)
    True
    """
    t = " ".join(unicodedata.normalize("NFKC", text or "").split())
    if not fold:
        return t
    t = _LATEX_SPACING.sub(" ", t.lower())
    t = re.sub(r"[$.,;:!?\"'`]", " ", t)
    return re.sub(r"\s+", " ", t).strip()


def problem_id_of(problem: str, prefix: str | None = None) -> str:
    """The problem id derived from a problem text: a hash of ``normalize_text(problem)``.

    Without ``prefix``: ``prob-`` + 16 hex of SHA-256, the id of imported sets (ProcessBench, OPC) and of
    records and problems without an id, shared across sets, so that held-out splits keep a problem on
    one side and the bootstrap clusters by problem (gsm8k: 400 proofs, 375 problems). With a prefix (the
    synthetic task's ``id_prefix``): ``<prefix>-`` + 12 hex of SHA-1, the synthetic ids as they always were.

    >>> problem_id_of("Find  x. ") == problem_id_of("Find x.") != problem_id_of("Find y.")
    True
    >>> problem_id_of("Find x.", prefix="syn")
    'syn-031ed6f17ed6'
    """
    norm = normalize_text(problem).encode("utf-8")
    if prefix is None:
        return "prob-" + hashlib.sha256(norm).hexdigest()[:16]
    return f"{prefix}-" + hashlib.sha1(norm).hexdigest()[:12]


class ProblemIndex:
    """The problems of a set of records (by ``problem_id`` and by text) and its record ids: the one leak check."""

    def __init__(self, records: Iterable[Problem] = ()):
        self.by_id: dict[str, str] = {}
        self.by_text: dict[str, str] = {}
        self.record_ids: set[str] = set()
        for t in records:
            self.add(t.id, t.problem_id, t.problem)

    def add(self, record_id: str, problem_id: str, problem: str) -> None:
        self.by_id.setdefault(problem_id, record_id)
        self.by_text.setdefault(problem_id_of(problem), record_id)
        self.record_ids.add(record_id)

    def has_text(self, problem: str) -> bool:
        return problem_id_of(problem) in self.by_text

    def shared(self, t: Problem) -> str | None:
        """Why ``t`` is on both sides (a message naming the record, the field and the indexed record), or None."""
        if t.problem_id in self.by_id:
            return (f"record {t.id!r}, field 'problem_id': problem {t.problem_id!r} is on both sides "
                    f"(held-out record {self.by_id[t.problem_id]!r})")
        held = self.by_text.get(problem_id_of(t.problem))
        if held is not None:
            return (f"record {t.id!r}, field 'problem': the same problem text as held-out record {held!r} "
                    "(a problem on both sides)")
        if t.id in self.record_ids:
            return f"record {t.id!r}, field 'id': on both sides"
        return None


def assert_disjoint(train: Iterable[Problem], held_out: Iterable[Problem], why: str = "") -> None:
    """Raise ``InputError`` naming the first training record that shares a problem (id or text) or a record id
    with the held-out set; ``why`` is appended to the message."""
    index = ProblemIndex(held_out)
    for t in train:
        msg = index.shared(t)
        if msg:
            raise InputError(msg + why)
