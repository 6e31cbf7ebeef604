"""Problem curation: keep proof problems, remove answer-centric tasks and duplicates (section 3.1).

``python -m data_pipeline.curate input=PATH out=DIR [classifier.enabled=true classifier.endpoint.base_url=URL]
[near_duplicate_threshold=0.9]``

Input: problems in our file formats (``verifier.formats.load_proofbench_problems``:
the IMO-ProofBench v2 CSV or a JSONL of problems). Each problem is kept or removed with ONE reason:

1. ``answer_centric:<type>`` by rules — an options list ``(A) ... (B) ...`` or "which of the
   following" (``multiple_choice``), "true or false" (``true_false``), blanks ``___`` /
   ``\\underline{\\hspace..}`` / "fill in the blank" (``fill_in_blank``);
2. ``duplicate`` (same folded text, ``verifier.identity.normalize_text(fold=True)``, as an earlier kept problem) and ``near_duplicate``
   (cosine similarity of character n-gram TF-IDF vectors >= ``near_duplicate_threshold``);
3. with ``classifier.enabled``, an LLM on the engine layer labels the rest with
   ``verifier/prompts/classify_problem.j2``; the label is parsed from the answer block with an
   explicit status. ``answer_centric:<type> (classifier)`` removes; a failed or unparseable
   classification (status in ``classifier_status``) follows ``classifier.on_failure``
   (``keep``, ``remove`` as ``classifier_failed``, or ``error``) and is counted either way.

Outputs: ``problems.jsonl`` (kept; the problem JSONL that ``data_pipeline.candidates`` reads),
``removed.jsonl`` (id, reason, detail, problem), ``curate_summary.json``, ``curation.png`` and a
card ``README.md`` with the counts.
"""

from __future__ import annotations

import itertools
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

from verifier.budget import check_budget
from verifier.config import EndpointConfig, Sampling, hydra_main
from verifier.engine import GenerationRequest, OpenAIEngine, base_seed
from verifier.errors import InputError
from verifier.formats import ProofProblem, load_proofbench_problems
from verifier.identity import normalize_text
from verifier.io import write_jsonl
from verifier.parser import JudgeAnswer, _answer_fields
from verifier.records import ParseStatus
from verifier.templates import as_messages, render

TASK_TYPES = ("proof", "true_false", "multiple_choice", "fill_in_blank", "other_answer")


@dataclass
class ClassifierConfig:
    """The optional LLM task-type classifier (engine layer, ``classify_problem.j2``)."""

    enabled: bool = False
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    template: str = "classify_problem"
    temperature: float = 0.0
    max_tokens: int = 256
    seed: int = 0
    on_failure: str = "keep"  # keep | remove | error: what an unparseable / failed classification does


@dataclass
class CurateConfig:
    """Options of ``python -m data_pipeline.curate`` (mirrored by ``configs/curate.yaml``)."""

    input: str | None = None  # IMO-ProofBench CSV or a problems JSONL
    out: str | None = None
    rules: bool = True  # rule-based answer-centric filter
    exact_duplicates: bool = True
    near_duplicate_threshold: float | None = 0.9  # null: no near-duplicate removal
    classifier: ClassifierConfig = field(default_factory=ClassifierConfig)
    plot: bool = True
    progress: bool = True


@dataclass
class Decision:
    """Kept (``reason=""``) or removed with a reason and a detail."""

    id: str
    reason: str = ""
    detail: str = ""
    classifier_label: str | None = None
    classifier_status: str | None = None

    @property
    def kept(self) -> bool:
        return not self.reason


# ------------------------------------------------------------------------------------------ rules

# Rules are written from the formats exam datasets use (not fitted to a measured set; the measured
# precision/recall on tests/data/curate_formats.jsonl is in docs/data_pipeline.md). Each rule has a name
# that the decision's detail reports.

_MC_PHRASES = re.compile(
    r"which (?:one )?of (?:the following|these|the (?:options|choices|answers)(?: below| given)?)|"
    r"choose the (?:correct|right|best)|select the (?:correct|right|best)|"
    r"(?:select|choose|pick) (?:one|all) (?:of the following|that apply|answer)|circle the (?:letter|correct)|"
    r"answer choices|the correct (?:option|choice)|[(\[]\s*multiple[- ]choice\s*[)\]]", re.IGNORECASE)
_TF = re.compile(
    r"(?:true\s*(?:or|/)\s*false|false\s*(?:or|/)\s*true)(?!\s*(?:questions?|items?|problems?|tests?|quiz))|[(\[]\s*T\s*/\s*F\s*[)\]]|(?:^|\n)\s*T\s*/\s*F\s*[:.]|"
    r"\bT or F\b|correct or incorrect|"
    r"(?:is|are) (?:the following|this|these|each of the following) (?:statements?|claims?|assertions?) "
    r"(?:true|correct|valid)\s*\?|"
    r"(?:state|decide|determine|indicate|say|mark|tell|check) (?:whether|if) (?:the|each|this|these) "
    r"(?:following |given )?(?:statements?|claims?|assertions?) (?:is|are) (?:true|correct)", re.IGNORECASE)
_BLANK = re.compile(
    r"_{3,}|(?:\\_\s*){2,}|\\underline\{\s*(?:\\hspace|\\quad|\\qquad|\\phantom|~|\\ |\}|\s+\})|"
    r"\\rule\{|\\blank\b|\\boxed\{\s*(?:\\phantom|\\quad|\\qquad|\})|\[\s*blank\s*\]|"
    r"fill in the blanks?|fill in the missing|fill in\s*:|fill(?:ing)? the blanks?|complete the blanks?|"
    r"\(\s+\)|\u25a1|\u2610", re.IGNORECASE)

# option labels: A-E / a-e, also full-width (NFKC) and circled (mapped below) letters
_CIRCLED = {chr(0x24B6 + i): f"({chr(65 + i)})" for i in range(26)} | {chr(0x24D0 + i): f"({chr(97 + i)})"
                                                                          for i in range(26)}
_LATEX_WRAP = re.compile(r"\\(?:textbf|textrm|textnormal|textit|mathrm|mathbf|mathit|text|emph|bf|rm|it|"
                         r"displaystyle|qquad|quad|hfill|enspace|hspace\{[^}]*\}|item)(?![a-zA-Z])|\\[,;: ]")
_LEAD = r"(?:^|(?<=[\s,;:]))"  # an option label starts the text, a line, or follows a space/separator
_LEAD_BRACKET = r"(?<![A-Za-z\\_^*/])"  # a bracketed label: anywhere but after a name (``f(a)``, ``x_(a)``)
_OPTION_STYLES = {  # name: regex of one label; the letter is group 1
    "(A)": _LEAD_BRACKET + r"\(\s*([A-Ea-e])\s*\)",
    "[A]": _LEAD_BRACKET + r"\[\s*([A-Ea-e])\s*\]",
    "A)": _LEAD + r"([A-Ea-e])\)",
    "A.": _LEAD + r"([A-Ea-e])\.(?=\s*\S)(?!\s*[A-Ea-e]\.)",
    "A:": _LEAD + r"([A-Ea-e]):(?=\s*\S)",
}
_OPTION_RE = {k: re.compile(v, re.MULTILINE) for k, v in _OPTION_STYLES.items()}
_ASY = re.compile(r"\[asy\].*?(?:\[/asy\]|$)", re.DOTALL | re.IGNORECASE)  # Asymptote code: labels, not options
# what precedes a letter that is no option label: an operator (``(1 + a)``) or a naming noun (``Case A:``)
_NOT_LABEL = re.compile(r"(?:[-+*/=<>^_(]|\b(?:case|player|step|type|part|point|team|group|box|room|claim|"
                        r"statement|condition|section|figure|fig|table|question|problem|exercise|lemma|theorem|"
                        r"hint|line|plane|vertex|set|class|person|student|runway))\s*$", re.IGNORECASE)
_HEADER = re.compile(r"(?:^|\n|[.?:]\s)\s*(?:options|choices|answer options|possible answers|alternatives|(?:select|choose) one)\s*:",
                     re.IGNORECASE)
_IMPERATIVE = (r"prove|show|find|determine|compute|calculate|evaluate|explain|construct|describe|give|let|suppose|"
               r"assume|deduce|hence|verify|justify|sketch|state")
_PART_VERB = re.compile(rf"^\s*(?:{_IMPERATIVE}|if|what|how|why|is|are|does|do|can)\b", re.IGNORECASE)
# the last item runs to the end of its line: only an instruction marks it as a part ("does not exist" is an option)
_LAST_PART_VERB = re.compile(rf"^\s*(?:{_IMPERATIVE})\b", re.IGNORECASE)


def _option_text(text: str) -> str:
    """Text with option labels in plain form: circled and full-width letters, LaTeX wrappers, ``$``/braces gone."""
    t = "".join(_CIRCLED.get(c, c) for c in _ASY.sub(" ", text))
    t = unicodedata.normalize("NFKC", t)
    t = t.replace("\\\\", "\n")
    t = _LATEX_WRAP.sub(" ", t)
    return re.sub(r"[${}]", " ", t)


def _option_run(t: str, style: str) -> tuple[list[str], list[str], int]:
    """The longest run of labels ``A, B, C, ...`` (one case, in order) of one style: labels, item texts, start."""
    best: tuple[list[str], list[str], int] = ([], [], -1)
    for case in (str.upper, str.lower):
        ms = [m for m in _OPTION_RE[style].finditer(t) if case(m.group(1)) == m.group(1)
              and not _NOT_LABEL.search(t[max(0, m.start() - 12):m.start()])]
        for i0, m0 in enumerate(ms):
            if m0.group(1).upper() != "A":
                continue
            run = [m0]
            for m in ms[i0 + 1:]:
                if ord(m.group(1).upper()) == ord(run[-1].group(1).upper()) + 1:
                    run.append(m)
            if len(run) > len(best[0]):
                items = [t[a.end():b.start()] for a, b in itertools.pairwise(run)]
                items.append(t[run[-1].end():].split("\n", 1)[0][:120])
                best = ([m.group(1) for m in run], items, m0.start())
    return best


def _options_list(text: str) -> tuple[str, str] | None:
    """``(rule, evidence)`` when the text carries an options list, in any of the styles of ``_OPTION_STYLES``.

    An options list: labels A, B, C, ... in order and in one style whose items are short answers (not
    sub-questions starting with "prove", "find", ...). Three labels, lower case ones after a sentence ("?"/".";
    ``(a) (b) (c)`` are also the parts or conditions of proof problems); after an ``Options:`` / ``Choices:``
    header two suffice. Asymptote code, letters after an operator (``(1 + a)``) or a naming noun (``Case A:``)
    are not options.
    """
    t = _option_text(text)
    header = _HEADER.search(t)
    for style in _OPTION_STYLES:
        labels, items, start = _option_run(t, style)
        if len(labels) < 2:
            continue
        if any(len(x.strip()) > 150 or _PART_VERB.match(x) for x in items[:-1]) or _LAST_PART_VERB.match(items[-1]):
            continue
        after_header = header is not None and 0 <= start - header.end() <= 40
        # lower-case labels without a header also need a full question or sentence before them ("...?" or
        # "..."): ``(a) (b) (c)`` after "such that" / "satisfying:" are the conditions of a proof problem
        question = t[:start].rstrip().rstrip(")\"'").endswith(("?", "."))
        if len(labels) >= 2 and after_header or len(labels) >= 3 and (labels[0].isupper() or question):
            name = "mc_options_after_header" if after_header else "mc_options"
            shown = " ".join(style.replace("A", x).replace("a", x) for x in labels)
            return name, f"{shown} ({style} style)"
    return None


def rule_match(problem: str) -> tuple[str, str, str]:
    """``(task type, rule name, matched evidence)``; ``("proof", "", "")`` when no rule fires.

    Rules, in order: ``true_false`` (``tf_phrase``: "true or false", "(T/F)", "is the following statement
    true?", ...), ``multiple_choice`` (``mc_phrase``: "which of the following", "choose the correct", ...;
    ``mc_options`` / ``mc_options_after_header``: an options list in any of the styles ``(A) x``, ``A) x``,
    ``A. x``, ``A: x``, ``[A] x``, full-width or circled letters, lower case, inline or one per line),
    ``fill_in_blank`` (``blank``: ``___``, ``\\underline{\\hspace..}``, ``\\rule{..}``, empty ``( )``, "fill in
    the blank", ...).

    >>> rule_match("Ⓐ 1 Ⓑ 2 Ⓒ 3 Ⓓ 4")[:2]
    ('multiple_choice', 'mc_options')
    >>> rule_match("Find all functions with (a) f(0)=1 (b) f(x+y)=f(x)f(y) (c) f is continuous.")
    ('proof', '', '')
    """
    text = problem or ""
    m = _TF.search(text)
    if m:
        return "true_false", "tf_phrase", m.group(0)
    m = _MC_PHRASES.search(text)
    if m:
        return "multiple_choice", "mc_phrase", m.group(0)
    o = _options_list(text)
    if o:
        return "multiple_choice", o[0], o[1]
    m = _BLANK.search(unicodedata.normalize("NFKC", text))
    if m:
        return "fill_in_blank", "blank", m.group(0)
    return "proof", "", ""


def rule_task_type(problem: str) -> tuple[str, str]:
    """``(task type, matched evidence)`` by rules; ``("proof", "")`` when no rule fires (see ``rule_match``).

    >>> rule_task_type("True or false: every bounded sequence converges.")[0]
    'true_false'
    >>> rule_task_type("Which of the following is prime? (A) 4 (B) 6 (C) 7 (D) 9")[0]
    'multiple_choice'
    >>> rule_task_type("The derivative of $x^2$ is ____.")[0]
    'fill_in_blank'
    >>> rule_task_type("Prove that there are infinitely many primes.")
    ('proof', '')
    """
    kind, rule, evidence = rule_match(problem)
    return (kind, f"{rule}: {evidence}") if rule else ("proof", "")


# ------------------------------------------------------------------------------------- duplicates


def near_duplicate_pairs(texts: Sequence[str], threshold: float, chunk: int = 2048) -> list[tuple[int, int, float]]:
    """``(i, j, similarity)`` with ``j < i`` for each i whose most similar earlier text reaches ``threshold``.

    Cosine similarity of character 3-5-gram TF-IDF vectors (scikit-learn), computed in chunks.
    """

    if len(texts) < 2:
        return []
    x = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True).fit_transform(texts)
    out = []
    for start in range(0, len(texts), chunk):
        sim = (x[start:start + chunk] @ x.T).toarray()
        for r in range(sim.shape[0]):
            i = start + r
            if i == 0:
                continue
            row = sim[r, :i]
            j = int(np.argmax(row))
            if row[j] >= threshold:
                out.append((i, j, float(row[j])))
    return out


# ------------------------------------------------------------------------------------- classifier


def parse_task_type(text: str | None):
    """The classifier's label from the last answer block (``task_type: ...``), with an explicit status.

    >>> parse_task_type("Asks for a proof.\\n<final_answer>\\ntask_type: proof\\n</final_answer>").value
    'proof'
    >>> parse_task_type("<final_answer>task_type: essay</final_answer>").status
    <ParseStatus.BAD_VALUE: 'bad_value'>
    >>> parse_task_type("proof").status
    <ParseStatus.NO_ANSWER_BLOCK: 'no_answer_block'>
    """

    value, failed, before = _answer_fields(text, ("task_type", "type", "label"))
    if failed:
        return failed
    v = re.sub(r"[\s-]+", "_", value.strip().lower().strip("*`'\""))
    v = {"true_or_false": "true_false", "multiple_choice_question": "multiple_choice", "mcq": "multiple_choice",
         "fill_in_the_blank": "fill_in_blank", "fill_in_blanks": "fill_in_blank"}.get(v, v)
    if v not in TASK_TYPES:
        return JudgeAnswer(ParseStatus.BAD_VALUE, raw_text=text or "", rationale=before,
                           detail=f"task_type: {value!r} is not one of {', '.join(TASK_TYPES)}")
    return JudgeAnswer(ParseStatus.OK, v, before, text or "")


def classify(problems: Sequence[ProofProblem], cfg: ClassifierConfig, progress: bool = False) -> list[tuple[str | None, str, str]]:
    """``(label or None, status, detail)`` per problem from the LLM classifier."""

    engine = OpenAIEngine(cfg.endpoint)
    reqs = [GenerationRequest(as_messages(render(cfg.template, problem=p.problem)), n=1,
                              seed=base_seed(f"classify:{p.id}", cfg.seed), key=p.id) for p in problems]
    check_budget(engine, cfg.max_tokens, reqs, what="classifier.max_tokens")
    outs = engine.generate(reqs, Sampling(temperature=cfg.temperature, max_tokens=cfg.max_tokens),
                           progress=progress)
    res = []
    for [c] in outs:
        if c.status != "ok":
            res.append((None, c.status, c.error or ""))
            continue
        a = parse_task_type(c.text)
        if not a.ok and c.finish_reason == "length":
            res.append((None, ParseStatus.TRUNCATED.value, a.detail))
        else:
            res.append((a.value, a.status.value, a.detail))
    return res


# ------------------------------------------------------------------------------------------- run


def curate(problems: Sequence[ProofProblem], cfg: CurateConfig) -> list[Decision]:
    """One decision per problem, in input order (see the module docstring for the order of the filters)."""
    if cfg.classifier.on_failure not in ("keep", "remove", "error"):
        raise InputError(f"curate config, field 'classifier.on_failure': use keep, remove or error, "
                         f"got {cfg.classifier.on_failure!r}")
    t = cfg.near_duplicate_threshold
    if t is not None and not 0.0 < t <= 1.0:
        raise InputError(f"curate config, field 'near_duplicate_threshold': expected a value in (0, 1], got {t}")
    dec = [Decision(p.id) for p in problems]
    if cfg.rules:
        for d, p in zip(dec, problems):
            kind, rule, evidence = rule_match(p.problem)
            if kind != "proof":
                d.reason, d.detail = f"answer_centric:{kind}", f"rule {rule} matched {evidence!r}"
    live = [i for i, d in enumerate(dec) if d.kept]
    norm = {i: normalize_text(problems[i].problem, fold=True) for i in live}
    if cfg.exact_duplicates:
        first: dict[str, int] = {}
        for i in live:
            if norm[i] in first:
                dec[i].reason, dec[i].detail = "duplicate", f"same normalised text as {problems[first[norm[i]]].id!r}"
            else:
                first[norm[i]] = i
        live = [i for i in live if dec[i].kept]
    if t is not None:
        # compare each problem with every earlier survivor; a near-duplicate of a removed one is judged again
        for a, b, s in near_duplicate_pairs([norm[i] for i in live], t):
            i, j = live[a], live[b]
            if dec[j].kept and dec[i].kept:
                dec[i].reason, dec[i].detail = "near_duplicate", f"similarity {s:.3f} to {problems[j].id!r}"
        live = [i for i in live if dec[i].kept]
    if cfg.classifier.enabled and live:
        labels = classify([problems[i] for i in live], cfg.classifier, cfg.progress)
        failed = []
        for i, (label, status, detail) in zip(live, labels):
            d = dec[i]
            d.classifier_label, d.classifier_status = label, status
            if status != "ok":
                failed.append((problems[i].id, status, detail))
                if cfg.classifier.on_failure == "remove":
                    d.reason, d.detail = "classifier_failed", f"{status}: {detail}"
            elif label != "proof":
                d.reason, d.detail = f"answer_centric:{label}", "LLM classifier"
        if failed and cfg.classifier.on_failure == "error":
            pid, status, detail = failed[0]
            raise RuntimeError(f"{len(failed)} classification(s) failed, e.g. record {pid!r}, field "
                               f"'classifier_status': {status} ({detail}); on_failure=keep or remove to continue")
    return dec


def summary(problems: Sequence[ProofProblem], dec: Sequence[Decision], cfg: CurateConfig) -> dict[str, Any]:
    reasons = Counter(d.reason for d in dec if not d.kept)
    cls = Counter(d.classifier_status for d in dec if d.classifier_status is not None)
    return {
        "input": cfg.input, "problems": len(problems), "kept": sum(d.kept for d in dec),
        "removed": sum(not d.kept for d in dec), "removed_by_reason": dict(sorted(reasons.items())),
        "classifier": {"enabled": cfg.classifier.enabled, "status": dict(sorted(cls.items())),
                       "on_failure": cfg.classifier.on_failure,
                       "kept_after_failure": sum(1 for d in dec if d.kept and d.classifier_status not in (None, "ok"))},
        "near_duplicate_threshold": cfg.near_duplicate_threshold, "rules": cfg.rules,
    }


def card(s: dict[str, Any], dec: Sequence[Decision], problems: Sequence[ProofProblem]) -> str:
    rows = "\n".join(f"| {k} | {v} |" for k, v in s["removed_by_reason"].items()) or "| (none) | 0 |"
    by_id = {p.id: p for p in problems}
    ex = "".join(f"- `{d.id}` ({d.reason}; {d.detail}): {by_id[d.id].problem[:160]!r}\n"
                 for d in [d for d in dec if not d.kept][:30])
    cls = s["classifier"]
    return (
        "# Curated proof problems\n\n"
        "Section 3.1 *Parsing & Filtering*: answer-centric tasks (true-or-false, multiple choice,\n"
        "fill-in-the-blank) and duplicates removed; `python -m data_pipeline.curate`.\n\n"
        f"Input: `{s['input']}`\n\n"
        f"- problems read: {s['problems']}\n- kept: {s['kept']} (`problems.jsonl`)\n"
        f"- removed: {s['removed']} (`removed.jsonl`)\n"
        f"- LLM classifier: {'on' if cls['enabled'] else 'off'}"
        + (f"; statuses {cls['status']}; failures kept: {cls['kept_after_failure']} (on_failure={cls['on_failure']})"
           if cls["enabled"] else "") + "\n\n"
        "## Removed by reason\n\n| reason | problems |\n|---|---|\n" + rows + "\n\n"
        + ("## Examples of removed problems\n\n" + ex if ex else "")
    )


def plot(s: dict[str, Any], path: Path) -> None:
    # lazy: matplotlib is slow to import and needs its backend set first; only the plot uses it
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["kept"] + list(s["removed_by_reason"])
    values = [s["kept"]] + list(s["removed_by_reason"].values())
    fig, ax = plt.subplots(figsize=(6, 0.5 + 0.4 * len(labels)))
    ax.barh(labels[::-1], values[::-1], color=["tab:red"] * (len(labels) - 1) + ["tab:green"])
    ax.set_xlabel("problems")
    ax.set_title(f"curation of {s['problems']} problems")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(cfg: CurateConfig) -> dict[str, Any]:
    """Load, decide, write ``problems.jsonl``, ``removed.jsonl``, summary, card and plot."""

    if not cfg.input or not cfg.out:
        raise InputError("curate config: input=PATH and out=DIR are required")
    problems = load_proofbench_problems(cfg.input)
    dec = curate(problems, cfg)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    kept, removed = [], []
    for p, d in zip(problems, dec):
        row = {k: v for k, v in asdict(p).items() if v or k in ("id", "problem")}
        if d.kept:
            kept.append(row)
        else:
            removed.append({"id": p.id, "reason": d.reason, "detail": d.detail, "classifier_label": d.classifier_label,
                            "classifier_status": d.classifier_status, "problem": p.problem})
    write_jsonl(out / "problems.jsonl", kept)
    write_jsonl(out / "removed.jsonl", removed)
    s = summary(problems, dec, cfg)
    (out / "curate_summary.json").write_text(json.dumps(s, indent=1) + "\n", encoding="utf-8")
    (out / "README.md").write_text(card(s, dec, problems), encoding="utf-8")
    if cfg.plot:
        plot(s, out / "curation.png")
    return s


def main() -> None:
    """Hydra app: ``python -m data_pipeline.curate input=PATH out=DIR``."""

    @hydra_main("curate", CurateConfig)
    def _run(cfg: CurateConfig) -> None:
        s = run(cfg)
        print(f"curate: kept {s['kept']} of {s['problems']} problems (removed {s['removed_by_reason']}); "
              f"problems: {Path(cfg.out) / 'problems.jsonl'}")

    _run()


if __name__ == "__main__":
    main()
