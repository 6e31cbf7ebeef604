"""Problem identity: the one text normalisation, the one problem id, the one proof-version id, the one leak check.

Two records are about the same problem when they share a ``problem_id`` or when their problem
texts are equal after ``normalize_text`` (Unicode NFKC, whitespace collapsed). Every id derived
from a text is ``problem_id_of(text)``; every check that a training set does not leak a held-out
problem is ``ProblemIndex`` (``assert_disjoint`` raises, ``ProblemIndex.shared`` filters).
Duplicate detection (``data_pipeline.curate``) folds the same normalisation further
(``normalize_text(text, fold=True)``: case, LaTeX spacing, punctuation).

A proof written by a prover is one version of one (problem, generator, sample): ``version_id`` builds its
id, ``parse_version_id`` reads it back (generation, ProverBench and its refine rounds, candidates and their
revision rounds). A repair of a proof is ``repair_id(parent, attempt)``.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable
from typing import NamedTuple, Protocol

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


class VersionId(NamedTuple):
    """The parts of a proof-version id (``parse_version_id``)."""

    problem_id: str
    generator: int
    sample: int
    round: int


_VERSION_ID = re.compile(r"^(?P<problem_id>.+)-g(?P<generator>\d+)-s(?P<sample>\d+)-r(?P<round>\d+)$")


def version_id(problem_id: str, sample: int = 0, round: int = 0, generator: int = 0) -> str:
    """The id of one proof version: ``<problem>-g<generator>-s<sample>-r<round>`` (round 0: the first proof,
    round r: its r-th revision; ``generator``: the index of the prover, 0 where there is one). This is the
    format of the candidate proofs (``data_pipeline.candidates``), the one most persisted files carry
    (candidates, selection, annotation tasks and exports, the annotated trajectories and datasets built on
    them); ProverBench and the refine loop name their versions the same way. The task's seed is drawn from it
    (``verifier.engine.base_seed``).

    >>> version_id("PB-Basic-001", 0), version_id("PB-Basic-001", 1, 2), version_id("p1", 2, 1, generator=3)
    ('PB-Basic-001-g0-s0-r0', 'PB-Basic-001-g0-s1-r2', 'p1-g3-s2-r1')
    """
    for name, v in (("sample", sample), ("round", round), ("generator", generator)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"version_id: {name} must be an integer >= 0, got {v!r}")
    return f"{problem_id}-g{generator}-s{sample}-r{round}"


def parse_version_id(vid: str) -> VersionId | None:
    """The parts of a ``version_id`` (problem id, generator, sample, round), or None for an id of another
    form (an imported or annotated record, a repair).

    >>> parse_version_id("PB-Basic-001-g0-s1-r2")
    VersionId(problem_id='PB-Basic-001', generator=0, sample=1, round=2)
    >>> all(parse_version_id(version_id(p, s, r, g)) == (p, g, s, r) for p in ("a-g1-s2-r3", "x/y") for s, r, g in
    ...     ((0, 0, 0), (3, 1, 2)))
    True
    >>> parse_version_id("t1") is None, parse_version_id("p-g0-s0-r0-repair1") is None
    (True, True)
    """
    m = _VERSION_ID.match(vid)
    if m is None:
        return None
    return VersionId(m["problem_id"], int(m["generator"]), int(m["sample"]), int(m["round"]))


def repair_id(parent_id: str, attempt: int) -> str:
    """The id of a repair of proof ``parent_id`` (``data_pipeline.augment``; attempt 0, 1, ...).

    >>> repair_id("p1-g0-s0-r0", 1)
    'p1-g0-s0-r0-repair1'
    """
    return f"{parent_id}-repair{attempt}"


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
