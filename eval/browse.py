"""Judgment browser: a static HTML site of proofs, expert annotations and every verification pass.

``python -m eval.browse judgments=PATH gold=PATH out=DIR`` joins the judgments written by
``python -m eval.judge`` (one line per trajectory: aggregate verdict, first error step, accept
fraction and the n passes of section 4.4, optionally meta-verifier grades of sections 3.3/4.3)
with the gold trajectories (our JSONL, a ProcessBench split, the OPC parquet, or a folder of
them) and writes a self-contained site: ``index.html`` (sortable, filterable, paginated table
over data split into JS chunks) and one page per trajectory (steps numbered zero-based as the
records number them, gold fatal and recoverable steps (appendix C.4) highlighted, each pass's
verdict, flagged step and rationale, the meta-verifier grade and comment).

No server and no network at view time: pages open over ``file://``. LaTeX is typeset by a
vendored KaTeX copied from ``katex_dir`` (installed from the npm registry by
``make browser-deps``); without it the pages show raw LaTeX and say so. All untrusted text
(problems, proofs, model outputs) goes through Jinja autoescaping or ``textContent``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from tqdm import tqdm

from verifier.config import hydra_main
from verifier.errors import InputError
from verifier.formats import load_gold
from verifier.io import DatasetError, iter_jsonl
from verifier.judgment import ROW_FIELDS, Judgment
from verifier.records import NO_STEP, MetaGrade, ProofTrajectory, RecordError

REPO = Path(__file__).resolve().parents[1]
ASSETS = Path(__file__).resolve().parent / "browser_assets"
DEFAULT_KATEX_DIR = REPO / ".vendor" / "katex"
# Files of the KaTeX npm package (``dist/``) the site needs; fonts are copied as woff2 only.
KATEX_FILES = ("katex.min.js", "katex.min.css", "contrib/auto-render.min.js")
MARKER = "browser.json"  # written last; also marks a directory this module may rebuild
FLAGS = ("false_accept", "false_reject", "parse_failure", "disagreement", "wrong_step")


@dataclass
class BrowseConfig:
    """``configs/browse.yaml``. Paths may be relative to the working directory."""

    judgments: str = "???"  # JSONL written by ``python -m eval.judge``
    gold: str = "???"  # trajectory JSONL, ProcessBench .json, OPC .parquet, or a folder of them
    out: str = "???"  # output folder (created; a previous browser there is replaced)
    title: str = "Judgment browser"
    page_size: int = 200  # index rows per page
    chunk_rows: int = 1000  # index rows per data/index-NNN.js file
    katex_dir: str = ""  # vendored KaTeX dist folder; "" = <repo>/.vendor/katex
    on_error: str = "raise"  # raise | skip: bad judgment rows, ids missing from gold


# --------------------------------------------------------------------------- judgments


@dataclass
class PassView:
    """One verification pass as shown on a trajectory page."""

    index: int
    verdict: str | None
    first_error_step: int
    parse_status: str
    detail: str
    rationale: str
    text: str
    meta_grade: str | None = None
    meta_comment: str = ""
    seed: int | None = None
    completion_tokens: int | None = None

    @property
    def ok(self) -> bool:
        return self.parse_status == "ok"


@dataclass
class JudgmentView:
    """One judgment row joined with its gold trajectory."""

    traj: ProofTrajectory
    verdict: str | None
    first_error_step: int
    accept_fraction: float | None
    passes: list[PassView]
    meta_grade: str | None = None
    meta_comment: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    meta_pass: int | None = None  # the pass the meta-verifier graded (eval.verifierbench)
    meta_status: str = ""  # its parse status; a failed grade is shown, not hidden

    # derived ------------------------------------------------------------------
    @property
    def gold(self) -> str | None:
        return None if self.traj.annotation is None else self.traj.annotation.polarity.value

    @property
    def gold_step(self) -> int | None:
        """Gold first fatal step; None when the set does not locate it (OPC) or no annotation."""
        a = self.traj.annotation
        if a is None or a.fatal_step_unknown:
            return None
        return a.first_fatal_error_step

    @property
    def flags(self) -> list[str]:
        out = []
        if self.gold == "invalid" and self.verdict == "valid":
            out.append("false_accept")
        if self.gold == "valid" and self.verdict == "invalid":
            out.append("false_reject")
        if any(not p.ok for p in self.passes):
            out.append("parse_failure")
        if len({p.verdict for p in self.passes if p.ok}) > 1:
            out.append("disagreement")
        gs = self.gold_step
        if (self.gold == "invalid" and self.verdict == "invalid" and gs is not None and gs != NO_STEP
                and self.first_error_step != gs):
            out.append("wrong_step")
        return out

    @property
    def meta_reward(self) -> float | None:
        """Trajectory grade's reward, else the mean over graded passes (section 4.3)."""
        if self.meta_grade:
            return MetaGrade(self.meta_grade).reward
        graded = [MetaGrade(p.meta_grade).reward for p in self.passes if p.meta_grade]
        return sum(graded) / len(graded) if graded else None

    @property
    def meta_label(self) -> str:
        if self.meta_grade:
            return self.meta_grade
        if self.meta_status and self.meta_status != "ok":
            return f"failed ({self.meta_status})"
        graded = [p for p in self.passes if p.meta_grade]
        if graded:
            return f"mean {self.meta_reward:.2f} ({len(graded)} graded)"
        return ""

    @property
    def judge_info(self) -> str:
        """How the judge ran (fields ``eval.judge`` writes beside the aggregate), for the page header."""
        e = self.extra
        parts = []
        if e.get("policy"):
            parts.append(f"policy {e['policy']}")
        if e.get("n") is not None:
            parts.append(f"{len(self.passes)} of n={e['n']} passes run")
        if e.get("early_stopped"):
            parts.append("early-stopped")
        if e.get("model"):
            parts.append(f"model {e['model']}")
        if e.get("status") not in (None, "ok"):
            parts.append(f"status {e['status']}")
        return ", ".join(str(p) for p in parts)

    def flagged_by(self, step: int) -> list[int]:
        """Indices of parsed rejecting passes whose first error step is ``step``."""
        return [p.index for p in self.passes if p.ok and p.verdict == "invalid" and p.first_error_step == step]


SHOWN = ROW_FIELDS - {"status", "policy", "n", "n_passes", "n_accept", "n_reject", "n_unparseable", "early_stopped",
                      "model", "meta_detail"}  # the rest of a row is listed under "Other judgment fields"


def judgment_view(row: Any, traj: ProofTrajectory | None, line: int | None = None) -> JudgmentView:
    """Read one judgment row (``verifier.judgment.Judgment.from_row``) and join it with its trajectory;
    errors name the record and the field."""
    if not isinstance(row, dict):
        raise RecordError(None, "<record>", f"expected a JSON object, got {type(row).__name__}", line)
    rid = row.get("id")
    if rid is None or str(rid).strip() == "":
        raise RecordError(None, "id", "missing", line)
    if traj is None:
        raise RecordError(str(rid), "id", "not in the gold file", line)
    j = Judgment.from_row(row, line, n_steps=len(traj.proof_steps))
    passes = []
    for i, p in enumerate(j.passes):
        g = j.pass_grades[i] if i < len(j.pass_grades) else None
        passes.append(PassView(i, None if p.verdict is None else p.verdict.value, p.first_error_step, p.status.value,
                               p.detail, p.rationale, p.raw_text,
                               None if g is None or g.grade is None else g.grade.value, "" if g is None else g.rationale,
                               j.seeds[i], j.completion_tokens[i]))
    return JudgmentView(traj, None if j.verdict is None else j.verdict.value, j.first_error_step, j.accept_fraction,
                        passes, None if j.meta_grade is None else j.meta_grade.value, j.meta_rationale,
                        {k: v for k, v in row.items() if k not in SHOWN}, j.meta_pass, j.meta_status)


def join(
    rows: Iterable[tuple[int | None, Any]], trajectories: Sequence[ProofTrajectory], on_error: str = "raise",
    label: str = "judgments",
) -> tuple[list[JudgmentView], list[RecordError]]:
    """Join ``(line, row)`` judgments with trajectories by id.

    ``on_error="raise"`` raises one :class:`verifier.io.DatasetError` listing every bad row;
    ``"skip"`` returns the errors so that they are counted and reported.
    """

    if on_error not in ("raise", "skip"):
        raise InputError(f"on_error must be raise or skip, got {on_error!r}")
    by_id = {t.id: t for t in trajectories}
    views: list[JudgmentView] = []
    errors: list[RecordError] = []
    seen: dict[str, int | None] = {}
    for line, row in rows:
        if isinstance(row, RecordError):
            errors.append(row)
            continue
        rid = str(row.get("id")) if isinstance(row, dict) and row.get("id") is not None else None
        try:
            if rid is not None and rid in seen:
                where = f" (first on line {seen[rid]})" if seen[rid] is not None else ""
                raise RecordError(rid, "id", f"duplicate judgment{where}", line)
            v = judgment_view(row, by_id.get(rid) if rid is not None else None, line)
        except RecordError as e:
            errors.append(e)
            continue
        seen[v.traj.id] = line
        views.append(v)
    if errors and on_error == "raise":
        raise DatasetError(label, errors)
    return views, errors


# --------------------------------------------------------------------------- site


def page_name(rid: str) -> str:
    """A file name for a trajectory id: readable prefix plus a hash (ids may hold any character).

    >>> page_name("math-0")
    'math-0-...html'
    >>> page_name("a/b c") != page_name("a_b_c")
    True
    """
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", rid)[:60].strip("._") or "t"
    return f"{slug}-{hashlib.sha1(rid.encode('utf-8')).hexdigest()[:10]}.html"


def _katex_source(katex_dir: str | os.PathLike | None) -> tuple[Path | None, str]:
    """(folder, version) of a usable vendored KaTeX, or (None, why not)."""
    d = Path(katex_dir) if katex_dir else DEFAULT_KATEX_DIR
    if not d.is_absolute() and not d.exists():
        d = REPO / d
    missing = [f for f in KATEX_FILES if not (d / f).is_file()]
    if missing:
        return None, f"KaTeX not found in {d} (missing {', '.join(missing)}); run `make browser-deps`"
    version = ""
    pkg = d / "package.json"
    if pkg.is_file():
        try:
            version = str(json.loads(pkg.read_text(encoding="utf-8")).get("version", ""))
        except (ValueError, OSError):
            version = ""
    return d, version


def _copy_katex(src: Path, dst: Path) -> None:
    for f in KATEX_FILES:
        (dst / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / f, dst / f)
    (dst / "fonts").mkdir(exist_ok=True)
    for font in (src / "fonts").glob("*.woff2"):
        shutil.copy2(font, dst / "fonts" / font.name)
    if (src / "LICENSE").is_file():
        shutil.copy2(src / "LICENSE", dst / "LICENSE")


def _js_data(obj: Any) -> str:
    """JSON safe to place in a script file (no ``</script>``, no ``<!--``)."""
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _snippet(text: str, n: int = 140) -> str:
    t = " ".join(text.split())
    return t if len(t) <= n else t[: n - 1] + "…"


def _index_row(i: int, v: JudgmentView, href: str) -> dict[str, Any]:
    t = v.traj
    n_ok = sum(1 for p in v.passes if p.ok)
    return {
        "n": i, "id": t.id, "href": href, "gold": v.gold, "gstep": v.gold_step,
        "v": v.verdict, "step": v.first_error_step, "af": v.accept_fraction,
        "np": len(v.passes), "nok": n_ok, "mg": v.meta_label, "mr": v.meta_reward,
        "subj": t.subject, "split": t.split, "flags": v.flags, "prob": _snippet(t.problem),
    }


def _prepare_out(out: Path) -> None:
    """Create ``out``; a previous browser there is replaced, any other non-empty folder is refused."""
    if out.exists() and any(out.iterdir()):
        if not (out / MARKER).is_file():
            raise FileExistsError(f"out: {out} is not empty and holds no judgment browser ({MARKER}); "
                                  "choose an empty or new folder")
        for sub in ("t", "data", "assets", "vendor"):
            shutil.rmtree(out / sub, ignore_errors=True)
        for f in ("index.html", MARKER):
            (out / f).unlink(missing_ok=True)
    (out / "t").mkdir(parents=True, exist_ok=True)
    (out / "data").mkdir(exist_ok=True)
    (out / "assets").mkdir(exist_ok=True)


def _env():
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(ASSETS)),
        autoescape=True,  # every template, whatever its extension: untrusted text is escaped
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt_af"] = lambda x: "—" if x is None else f"{x:.2f}"
    env.filters["fmt_step"] = lambda s: "none" if s is None or s == NO_STEP else f"step {s}"
    return env


def write_browser(
    judgments_rows: Iterable[Any],
    trajectories: Sequence[ProofTrajectory],
    out_dir: str | os.PathLike,
    *,
    title: str = "Judgment browser",
    page_size: int = 200,
    chunk_rows: int = 1000,
    katex_dir: str | os.PathLike | None = None,
    on_error: str = "raise",
    sources: dict[str, str] | None = None,
    progress: bool = False,
) -> Path:
    """Write the static site for ``judgments_rows`` (dicts as in the judge JSONL) and return ``index.html``.

    Called by ``python -m eval.browse`` and by evaluation reports. Bad rows raise (or, with
    ``on_error="skip"``, are counted and listed on the index page and in ``browser.json``).
    """
    if page_size < 1 or chunk_rows < 1:
        raise InputError("page_size and chunk_rows must be positive")
    rows = [(r if isinstance(r, tuple) and len(r) == 2 and isinstance(r[0], (int, type(None))) else (None, r))
            for r in judgments_rows]
    views, errors = join(rows, trajectories, on_error, (sources or {}).get("judgments", "judgments"))
    judged = {v.traj.id for v in views}
    unjudged = [t.id for t in trajectories if t.id not in judged]

    out = Path(out_dir)
    _prepare_out(out)
    for f in ("style.css", "index.js", "trajectory.js"):
        shutil.copy2(ASSETS / f, out / "assets" / f)
    katex_src, katex_info = _katex_source(katex_dir)
    katex = katex_src is not None
    if katex:
        _copy_katex(katex_src, out / "vendor" / "katex")
    else:
        print(f"warning: {katex_info}; LaTeX will be shown as raw text", file=sys.stderr)

    env = _env()
    tpl = env.get_template("trajectory.html.j2")
    names = [page_name(v.traj.id) for v in views]
    it: Iterable[int] = range(len(views))
    if progress:

        it = tqdm(it, desc="pages", unit="page")
    for i in it:
        v = views[i]
        steps = []
        ann = v.traj.annotation
        for s, text in enumerate(v.traj.proof_steps):
            steps.append({
                "index": s, "text": text,
                "fatal": ann is not None and ann.first_fatal_error_step == s,
                "recoverable": ann is not None and s in ann.recoverable_error_steps,
                "flagged_by": v.flagged_by(s),
                "aggregate": v.verdict == "invalid" and v.first_error_step == s,
            })
        html = tpl.render(
            title=title, v=v, t=v.traj, ann=ann, steps=steps, katex=katex, katex_info=katex_info,
            prev=names[i - 1] if i > 0 else None, next=names[i + 1] if i + 1 < len(views) else None,
            position=i + 1, total=len(views), flag_labels=FLAG_LABELS,
        )
        (out / "t" / names[i]).write_text(html, encoding="utf-8")

    index_rows = [_index_row(i, v, f"t/{names[i]}") for i, v in enumerate(views)]
    chunks = [index_rows[k: k + chunk_rows] for k in range(0, len(index_rows), chunk_rows)] or [[]]
    chunk_files = []
    for c, rows_c in enumerate(chunks):
        name = f"data/index-{c:03d}.js"
        (out / name).write_text(
            f"window.JB=window.JB||{{chunks:[]}};window.JB.chunks[{c}]={_js_data(rows_c)};\n", encoding="utf-8")
        chunk_files.append(name)
    counts = {f: sum(1 for r in index_rows if f in r["flags"]) for f in FLAGS}
    summary = {
        "title": title,
        "n_trajectories": len(views),
        "n_gold": len(trajectories),
        "unjudged": len(unjudged),
        "skipped": len(errors),
        "errors": [str(e) for e in errors],
        "flags": counts,
        "gold": dict(Counter(r["gold"] or "unannotated" for r in index_rows)),
        "verdicts": dict(Counter(r["v"] or "none" for r in index_rows)),
        "page_size": page_size,
        "chunks": chunk_files,
        "katex": katex,
        "katex_info": katex_info,
        "sources": sources or {},
    }
    (out / "data" / "config.js").write_text(
        f"window.JB=window.JB||{{chunks:[]}};window.JB.config={_js_data({'pageSize': page_size, 'nChunks': len(chunks), 'flags': FLAG_LABELS})};\n",
        encoding="utf-8")
    index_html = env.get_template("index.html.j2").render(
        title=title, summary=summary, chunk_files=chunk_files, unjudged_ids=unjudged[:50],
        flag_labels=FLAG_LABELS, sources=sources or {},
    )
    (out / "index.html").write_text(index_html, encoding="utf-8")
    (out / MARKER).write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return out / "index.html"


def write_browser_for_run(
    judgments_path: str | os.PathLike, trajectories: Sequence[ProofTrajectory], out_dir: str | os.PathLike,
    title: str = "Judgment browser",
) -> Path:
    """The browser of one evaluation run (``eval.score``, ``eval.verifierbench``): its judgments JSONL
    joined with its gold; rows that do not join (ids outside this gold, bad rows) are counted and
    listed on the index page instead of stopping the run. Returns ``index.html`` for the report link."""

    return write_browser(iter_jsonl(judgments_path), trajectories, out_dir, title=title, on_error="skip",
                         sources={"judgments": str(judgments_path)})


FLAG_LABELS = {
    "false_accept": "false accepts",
    "false_reject": "false rejects",
    "parse_failure": "parse failures",
    "disagreement": "passes disagree",
    "wrong_step": "wrong error step",
}


def browse(cfg: BrowseConfig) -> Path:
    """Run the command: load, join, write; prints counts and, last, the index path."""

    for k in ("judgments", "gold", "out"):
        if getattr(cfg, k) in ("", "???"):
            raise InputError(f"{k}=PATH is required: python -m eval.browse judgments=PATH gold=PATH out=DIR")
    if not Path(cfg.judgments).is_file():
        raise FileNotFoundError(f"judgments: {cfg.judgments} does not exist")
    gold = load_gold(cfg.gold, annotated=False)
    rows = list(iter_jsonl(cfg.judgments))
    index = write_browser(
        rows, gold, cfg.out, title=cfg.title, page_size=cfg.page_size, chunk_rows=cfg.chunk_rows,
        katex_dir=cfg.katex_dir or None, on_error=cfg.on_error,
        sources={"judgments": str(cfg.judgments), "gold": str(cfg.gold)}, progress=True,
    )
    s = json.loads((index.parent / MARKER).read_text(encoding="utf-8"))
    flags = " ".join(f"{k}={v}" for k, v in s["flags"].items())
    print(f"trajectories={s['n_trajectories']} gold={s['n_gold']} unjudged={s['unjudged']} "
          f"skipped={s['skipped']} katex={'yes' if s['katex'] else 'no'} {flags}")
    for e in s["errors"][:20]:
        print(f"  skipped: {e}")
    print(f"browser: {index.resolve()}")
    return index


def main() -> None:
    hydra_main("browse", BrowseConfig)(browse)()


if __name__ == "__main__":
    main()
