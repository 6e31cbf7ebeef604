"""Judgment browser (eval/browse.py): site contents, errors, and a real headless Chromium.

The browser tests drive Debian's ``/usr/bin/chromium`` with Playwright over ``file://`` URLs
(no server, no network). They FAIL when chromium is missing: ``make browser-deps`` (run by
``.ci/run``) installs it and vendors KaTeX. Screenshots go to ``test-artifacts/browser/``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from eval.browse import BrowseConfig, load_gold, page_name, write_browser
from verifier.config import compose
from verifier.io import DatasetError, write_jsonl
from verifier.parser import format_verification
from verifier.records import ProofTrajectory

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts" / "browser"
CHROMIUM = Path("/usr/bin/chromium")
KATEX = REPO / ".vendor" / "katex"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

XSS_STEP = "We claim <script>window.__pwned=1</script> and <img src=x onerror=\"window.__pwned2=1\"> hold."
XSS_PROBLEM = "Show <b>bold</b> is not bold; <script>window.__pwned3=1</script>"
XSS_RATIONALE = "Step 1 is wrong </div><script>window.__pwned4=1</script><a href=javascript:window.__pwned5=1>x</a>"


# --------------------------------------------------------------------------- hand-written data


def _traj(rid, steps, fatal=-1, rec=(), subject="Algebra", split="UG", problem=None, comment="", **kw):
    return {"id": rid, "problem_id": rid.split("#")[0], "problem": problem or f"Prove claim {rid}: $x^2 \\ge 0$.",
            "proof_steps": steps, "subject": subject, "split": split,
            "annotation": {"first_fatal_error_step": fatal, "recoverable_error_steps": list(rec),
                           "reviewer_comment": comment}, **kw}


def _pass(i, verdict, step=-1, rationale="Looks fine.", with_rationale=True, **kw):
    p = {"index": i, "verdict": verdict, "first_error_step": step,
         "parse_status": "ok" if verdict else "no_answer_block",
         "text": format_verification(verdict, step, rationale) if verdict else rationale}
    if with_rationale:
        p["rationale"] = rationale
    p.update(kw)
    return p


def _judgment(rid, verdict, step, passes, **kw):
    acc = sum(1 for p in passes if p["verdict"] == "valid") / len(passes) if passes else None
    return {"id": rid, "verdict": verdict, "first_error_step": step, "accept_fraction": acc, "passes": passes, **kw}


def handwritten(n_filler: int = 440) -> tuple[list[dict], list[dict]]:
    """Gold trajectories and judgments covering every flag, XSS payloads, LaTeX and pagination."""
    steps4 = ["Let $a = 1$.", "Then $a^2 = 2$.", "Hence $\\frac{a}{2} = 1$.", "So the claim holds. $\\blacksquare$"]
    gold = [
        _traj("t-fa", steps4, fatal=1, rec=[0], comment="Step 1 squares wrongly."),
        _traj("t-fr", steps4),
        _traj("t-pf", steps4, fatal=2),
        _traj("t-ws", steps4, fatal=1),
        _traj("t-ok", ["By AM-GM, \\[ \\frac{a+b}{2} \\ge \\sqrt{ab}. \\]", "Equality iff $a=b$."],
              subject="Inequalities", split="QE"),
        _traj("t-xss<i>/1", [XSS_STEP, "Second step & <em>more</em>. $\\href{javascript:window.__pwned8=1}{click}$ and $\\url{javascript:alert(1)}$"], fatal=0, problem=XSS_PROBLEM,
              subject="<b>Geo</b>", comment="<img src=x onerror=window.__pwned6=1> see step 0"),
        {"id": "t-un", "problem_id": "t-un", "problem": "No annotation here.", "proof_steps": ["One.", "Two."]},
    ]
    judg = [
        # eval.verifierbench's meta fields: the graded pass and the grade's parse status
        _judgment("t-fa", "valid", -1, [_pass(i, "valid") for i in range(8)], meta_grade="WRONG_POLARITY",
                  meta_rationale="The verifier missed the squaring error in step 1.", meta_pass=0, meta_status="ok"),
        _judgment("t-fr", "invalid", 2, [_pass(0, "valid"), _pass(1, "invalid", 2, "Step 2 divides by zero."),
                                         _pass(2, "valid"), _pass(3, "invalid", 3, "Step 3 is a leap.")],
                  meta_grade=None, meta_pass=1, meta_status="no_answer_block", meta_rationale=""),
        _judgment("t-pf", "invalid", 2, [_pass(0, "invalid", 2, "The fraction in step 2 is wrong.", with_rationale=False),
                                         _pass(1, None, rationale="I ran out of tokens")],
                  meta={"grade": "EXACT_MATCH", "rationale": "Same step, same reason."}),
        # the layout `python -m eval.judge` writes (verifier.judgment.Judgment.to_row), plus meta grades
        _judgment("t-ws", "invalid", 3, [
            _pass(0, "invalid", 3, "Step 3 does not follow.", with_rationale=False, detail="", seed=101,
                  completion_tokens=57, meta={"grade": "POOR_MATCH", "rationale": "Wrong step."}),
            _pass(1, "invalid", 3, "Step 3 is unjustified.", with_rationale=False, detail="", seed=102,
                  completion_tokens=61, meta_grade="BASIC_MATCH", meta_rationale="Right polarity, later step.")],
                  status="ok", policy="pessimistic", n=8, n_passes=2, n_accept=0, n_reject=2, n_unparseable=0,
                  early_stopped=True, model="tiny-lora"),
        _judgment("t-ok", "valid", -1, [_pass(i, "valid", rationale="AM-GM: $\\frac{a+b}{2} \\ge \\sqrt{ab}$.")
                                        for i in range(8)], meta_grade="EXACT_MATCH"),
        _judgment("t-xss<i>/1", "invalid", 0, [_pass(0, "invalid", 0, XSS_RATIONALE, meta_grade="EXACT_MATCH",
                                                     meta_rationale="<script>window.__pwned7=1</script>")]),
        _judgment("t-un", "invalid", 1, [_pass(0, "invalid", 1, "Two does not follow.")]),
    ]
    for i in range(n_filler):
        rid = f"f-{i:03d}"
        g_valid = i % 3 != 0
        gold.append(_traj(rid, ["Step A $x$.", "Step B.", "Step C."], fatal=-1 if g_valid else 1,
                          split=("UG", "QE", "PG")[i % 3], subject=("Algebra", "Geometry")[i % 2]))
        v_valid = i % 4 != 0
        judg.append(_judgment(rid, "valid" if v_valid else "invalid", -1 if v_valid else 1 + i % 2,
                              [_pass(0, "valid" if v_valid else "invalid", -1 if v_valid else 1 + i % 2)]))
    gold.append(_traj("unjudged-1", ["Only step."]))
    return gold, judg


def expected_flags(gold: list[dict], judg: list[dict]) -> dict[str, set[str]]:
    """Flags computed from the raw dicts, independently of eval.browse."""
    by_id = {g["id"]: g for g in gold}
    out: dict[str, set[str]] = {k: set() for k in
                                ("false_accept", "false_reject", "parse_failure", "disagreement", "wrong_step")}
    for j in judg:
        ann = by_id[j["id"]].get("annotation")
        fatal = ann["first_fatal_error_step"] if ann else None
        g = None if ann is None else "valid" if fatal == -1 else "invalid"
        if g == "invalid" and j["verdict"] == "valid":
            out["false_accept"].add(j["id"])
        if g == "valid" and j["verdict"] == "invalid":
            out["false_reject"].add(j["id"])
        if any(p["parse_status"] != "ok" for p in j["passes"]):
            out["parse_failure"].add(j["id"])
        if len({p["verdict"] for p in j["passes"] if p["parse_status"] == "ok"}) > 1:
            out["disagreement"].add(j["id"])
        if g == "invalid" and j["verdict"] == "invalid" and j["first_error_step"] != fatal:
            out["wrong_step"].add(j["id"])
    return out


@pytest.fixture(scope="module")
def data():
    return handwritten()


@pytest.fixture(scope="module")
def site(data, tmp_path_factory) -> Path:
    gold, judg = data
    trajs = [ProofTrajectory.from_dict(g) for g in gold]
    return write_browser(judg, trajs, tmp_path_factory.mktemp("site") / "browser", title="Test browser")


# --------------------------------------------------------------------------- site contents (no browser)


def test_summary_counts_match_an_independent_computation(site, data):
    gold, judg = data
    s = json.loads((site.parent / "browser.json").read_text())
    exp = expected_flags(gold, judg)
    assert s["flags"] == {k: len(v) for k, v in exp.items()}
    assert all(len(v) > 0 for v in exp.values())
    assert s["n_trajectories"] == len(judg) and s["n_gold"] == len(gold)
    assert s["unjudged"] == 1 and s["skipped"] == 0
    rows = []
    for c in s["chunks"]:
        text = (site.parent / c).read_text()
        rows += json.loads(text.split("=", 2)[2].rstrip(";\n"))
    assert [r["id"] for r in rows] == [j["id"] for j in judg]
    for r in rows:
        assert set(r["flags"]) == {k for k, ids in exp.items() if r["id"] in ids}, r["id"]
        assert (site.parent / r["href"]).is_file()


def test_untrusted_text_is_escaped_in_the_files(site):
    page = (site.parent / "t" / page_name("t-xss<i>/1")).read_text()
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page
    assert "<script>window.__pwned" not in page and "<img src=x" not in page and "<b>" not in page
    for c in (site.parent / "data").glob("*.js"):
        assert "<" not in c.read_text(), c  # JSON in data files escapes every '<'
    assert "<script>window" not in site.read_text()


def test_rationale_from_field_or_parsed_from_text(site):
    page = (site.parent / "t" / page_name("t-pf")).read_text()
    assert "The fraction in step 2 is wrong." in page  # no rationale field: parsed from text
    assert "no_answer_block" in page and "I ran out of tokens" in page
    assert "EXACT_MATCH" in page and "Same step, same reason." in page  # meta object at trajectory level
    ws = (site.parent / "t" / page_name("t-ws")).read_text()
    assert "POOR_MATCH" in ws and "Wrong step." in ws and "BASIC_MATCH" in ws and "Right polarity, later step." in ws


def test_bad_rows_name_record_and_field(data, tmp_path):
    gold, judg = data
    trajs = [ProofTrajectory.from_dict(g) for g in gold[:6]]
    cases = [
        ({"id": "nope", "verdict": "valid", "passes": []}, "nope", "id"),
        ({"id": "t-ok", "verdict": "maybe", "passes": []}, "t-ok", "verdict"),
        ({"id": "t-ok", "passes": []}, "t-ok", "verdict"),
        ({"id": "t-ok", "verdict": "valid", "passes": [{"index": 0, "verdict": "valid"}, {"meta_grade": "GREAT"}]},
         "t-ok", "passes[1].meta_grade"),
        ({"id": "t-ok", "verdict": "valid", "accept_fraction": 2}, "t-ok", "accept_fraction"),
        ({"id": "t-ok", "verdict": "invalid", "first_error_step": "two"}, "t-ok", "first_error_step"),
    ]
    for i, (row, rid, fld) in enumerate(cases):
        with pytest.raises(DatasetError) as e:
            write_browser([row], trajs, tmp_path / f"o{i}")
        err = e.value.errors[0]
        assert (err.record_id, err.field) == (rid, fld), str(e.value)
    # duplicates are errors too
    with pytest.raises(DatasetError, match="duplicate judgment"):
        write_browser([judg[0], judg[0]], trajs, tmp_path / "dup")
    # skip: counted and listed, nothing dropped silently
    idx = write_browser([judg[0], cases[0][0], cases[1][0]], trajs, tmp_path / "skip", on_error="skip")
    s = json.loads((idx.parent / "browser.json").read_text())
    assert s["n_trajectories"] == 1 and s["skipped"] == 2 and s["unjudged"] == 5
    html = idx.read_text()
    assert "2 judgment rows were skipped" in html and "nope" in html


def test_cli_contract_katex_fallback_and_out_dir_guard(data, tmp_path):
    gold, judg = data
    write_jsonl(tmp_path / "gold.jsonl", gold[:7])
    write_jsonl(tmp_path / "j.jsonl", judg[:7])
    out = tmp_path / "site"
    cmd = [sys.executable, "-m", "eval.browse", f"judgments={tmp_path / 'j.jsonl'}", f"gold={tmp_path / 'gold.jsonl'}",
           f"out={out}", f"katex_dir={tmp_path / 'no-katex'}"]
    r = subprocess.run(cmd, check=False, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == f"browser: {(out / 'index.html').resolve()}"
    assert "trajectories=7 gold=7 unjudged=0 skipped=0 katex=no" in r.stdout
    assert "LaTeX will be shown as raw text" in r.stderr
    assert not (out / "vendor").exists()
    assert 'id="katex-missing"' in (out / "t" / page_name("t-ok")).read_text()
    # a rebuild replaces the previous browser; a foreign non-empty folder is refused
    assert subprocess.run(cmd, check=False, cwd=REPO, capture_output=True, text=True, timeout=120).returncode == 0
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "keep.txt").write_text("mine")
    bad = cmd[:5] + [f"out={tmp_path / 'foreign'}"]
    r = subprocess.run(bad, check=False, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "holds no judgment browser" in r.stderr
    assert (tmp_path / "foreign" / "keep.txt").read_text() == "mine"


def test_config_mirrors_schema():
    cfg = compose("browse", BrowseConfig, ["judgments=a.jsonl", "gold=b.json", "out=c"])
    assert isinstance(cfg, BrowseConfig)
    assert (cfg.judgments, cfg.gold, cfg.out, cfg.page_size, cfg.on_error) == ("a.jsonl", "b.json", "c", 200, "raise")


# --------------------------------------------------------------------------- real headless Chromium


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium via Playwright, fresh profile; a missing chromium is a failure, not a skip."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make browser-deps` (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile, sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1300, "height": 900}, offline=True)
        yield ctx
        ctx.close()


@pytest.fixture()
def page(browser):
    pg = browser.new_page()
    pg.errors, pg.requests = [], []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    pg.on("request", lambda r: pg.requests.append(r.url))
    yield pg
    pg.close()


def _open_index(page, index: Path, hash_: str = ""):
    page.goto("about:blank")  # a real load each time, not a same-document fragment change
    page.goto(index.resolve().as_uri() + hash_)
    page.wait_for_selector("body[data-ready='1']")


def _shown_ids(page) -> list[str]:
    return page.eval_on_selector_all("#rows tr", "trs => trs.map(t => t.dataset.id)")


def _no_network(page):
    assert page.requests and all(u.startswith("file://") for u in page.requests), page.requests
    assert not page.errors, page.errors


def test_index_filter_sort_paginate_and_trajectory_page(page, site, data):
    gold, judg = data
    exp = expected_flags(gold, judg)
    _open_index(page, site)
    assert len(_shown_ids(page)) == 200
    assert "rows 1–200 of 447 (page 1 of 3)" in page.inner_text("#pager-top")
    page.screenshot(path=str(ARTIFACTS / "index.png"))
    page.click("#pager-top button.next")
    page.click("#pager-top button.next")
    assert len(_shown_ids(page)) == 47

    page.click("#filter-false_accept")
    assert set(_shown_ids(page)) == exp["false_accept"]
    assert "f=false_accept" in page.url
    page.screenshot(path=str(ARTIFACTS / "index-false-accepts.png"))
    page.click("#filter-wrong_step")
    assert set(_shown_ids(page)) == exp["wrong_step"]
    page.select_option("#split", "UG")
    assert set(_shown_ids(page)) == {i for i in exp["wrong_step"] if next(g for g in gold if g["id"] == i)["split"] == "UG"}
    page.click("#filter-all")
    page.select_option("#split", "")
    page.fill("#q", "t-")
    assert _shown_ids(page) == ["t-fa", "t-fr", "t-pf", "t-ws", "t-ok", "t-xss<i>/1", "t-un"]
    page.click("th[data-key='af']")  # ascending accept fraction
    ids = _shown_ids(page)
    assert ids[-2:] == ["t-fa", "t-ok"] and ids.index("t-fr") < ids.index("t-fa")
    page.click("th[data-key='af']")
    assert _shown_ids(page)[:2] == ["t-fa", "t-ok"]

    # a filter from the URL, then open a trajectory page from the table
    _open_index(page, site, "#f=false_accept")
    page.click("#rows a")
    page.wait_for_selector("body.trajectory[data-math]")  # after trajectory.js ran
    assert page.inner_text("#traj-id") == "t-fa"
    assert page.inner_text("#gold").startswith("invalid, first fatal error at step 1; recoverable errors at step 0")
    assert page.inner_text("#verdict") == "valid"
    assert page.inner_text("#meta-grade") == "WRONG_POLARITY"
    assert "missed the squaring error" in page.inner_text("#meta-comment")
    heads = page.eval_on_selector_all(".step .step-no", "e => e.map(x => x.textContent)")
    assert heads == ["Step 0", "Step 1", "Step 2", "Step 3"]
    assert page.get_attribute("#step-1", "class").split() == ["step", "fatal"]
    assert page.get_attribute("#step-0", "class").split() == ["step", "recoverable"]
    assert "gold: first fatal error" in page.inner_text("#step-1")
    assert page.locator(".pass").count() == 8
    assert "meta: WRONG_POLARITY" in page.inner_text("#pass-0") and "meta:" not in page.inner_text("#pass-1")
    assert page.locator("#step-1 .katex").count() >= 1, "KaTeX did not typeset (run `make browser-deps`)"
    assert page.evaluate("document.body.dataset.math") == "katex"
    assert "Step 1 squares wrongly." in page.inner_text("#reviewer-comment")
    page.screenshot(path=str(ARTIFACTS / "trajectory-false-accept.png"), full_page=True)

    # passes: verdict, flagged step, rationale, per-pass meta grade and comment
    page.goto((site.parent / "t" / page_name("t-ws")).as_uri())
    p0 = page.inner_text("#pass-0")
    assert "Pass 0: invalid, flags step 3" in p0 and "Step 3 does not follow." in p0 and "POOR_MATCH" in p0
    assert "Right polarity, later step." in page.inner_text("#pass-1")
    assert "flagged by passes 0, 1" in page.inner_text("#step-3")
    assert "aggregate first error" in page.inner_text("#step-3")
    assert page.inner_text("#meta-grade") == "mean 0.38 (2 graded)"
    assert page.inner_text("#judge") == "policy pessimistic, 2 of n=8 passes run, early-stopped, model tiny-lora"
    assert "seed 101 · 57 tokens" in p0
    page.screenshot(path=str(ARTIFACTS / "trajectory-wrong-step.png"), full_page=True)
    page.goto((site.parent / "t" / page_name("t-fr")).as_uri())
    assert page.inner_text("#meta-grade") == "failed (no_answer_block)"  # a failed grade is shown
    assert "meta: failed (no_answer_block)" in page.inner_text("#pass-1")
    page.goto((site.parent / "t" / page_name("t-un")).as_uri())
    assert page.inner_text("#gold") == "unannotated" and page.locator(".step.fatal").count() == 0
    page.goto((site.parent / "t" / page_name("t-pf")).as_uri())
    assert "unparsed (no_answer_block" in page.inner_text("#pass-1")
    _no_network(page)


def test_untrusted_text_runs_nothing_in_the_browser(page, site):
    pwned = "[1,2,3,4,5,6,7].map(i => window['__pwned' + (i === 1 ? '' : i)])"
    _open_index(page, site, "#q=xss")
    assert _shown_ids(page) == ["t-xss<i>/1"]
    row = page.inner_text("#rows tr")
    assert "<b>Geo</b>" in row and "<script>window.__pwned3=1</script>" in row
    assert page.evaluate(pwned) == [None] * 7
    page.screenshot(path=str(ARTIFACTS / "index-xss.png"))
    page.click("#rows a")
    page.wait_for_selector("body.trajectory[data-math]")  # after trajectory.js ran
    assert page.inner_text("#traj-id") == "t-xss<i>/1"
    assert page.evaluate(pwned) == [None] * 7
    step0 = page.inner_text("#step-0 .step-text")
    assert "<script>window.__pwned=1</script>" in step0 and '<img src=x onerror="window.__pwned2=1">' in step0
    assert "<script>window.__pwned3=1</script>" in page.inner_text("#problem")
    assert "</div><script>window.__pwned4=1</script>" in page.inner_text("#pass-0 .rationale")
    assert "<img src=x onerror=window.__pwned6=1>" in page.inner_text("#reviewer-comment")
    # nothing from the data became an element: the only scripts are ours, no img, no javascript: link
    srcs = page.eval_on_selector_all("script", "s => s.map(x => x.getAttribute('src'))")
    assert srcs and all(s and (s.startswith("../vendor/katex/") or s == "../assets/trajectory.js") for s in srcs)
    assert page.locator("img").count() == 0 and page.locator("b, em, a[href^='javascript']").count() == 0
    page.locator("#pass-0 details summary").click()
    assert page.evaluate(pwned) == [None] * 7
    page.screenshot(path=str(ARTIFACTS / "trajectory-xss.png"), full_page=True)
    _no_network(page)


# --------------------------------------------------------------------------- the real sets


def _replayed_judgments(trajs: list[ProofTrajectory], n_passes: int = 4) -> list[dict]:
    """Deterministic judgments: gold replayed, except every 7th record is flipped and every 11th has
    an unparsed pass."""
    out = []
    for k, t in enumerate(trajs):
        valid = t.annotation.is_valid
        if k % 7 == 3:
            valid = not valid
        step = -1 if valid else max(t.annotation.first_fatal_error_step, 0)
        passes = [_pass(i, "valid" if valid else "invalid", step, f"Checked {t.id}; step {step}.")
                  for i in range(n_passes)]
        if k % 11 == 5:
            passes[-1] = _pass(n_passes - 1, None, rationale="(truncated)")
        out.append(_judgment(t.id, "valid" if valid else "invalid", step, passes))
    return out


@pytest.mark.slow
def test_real_sets_processbench_and_opc(page, shared_data, tmp_path):
    pb = load_gold(shared_data / "processbench")  # a folder: the four ProcessBench splits, 3,400 records
    assert len(pb) == 3400
    judg = _replayed_judgments(pb)
    idx = write_browser(judg, pb, tmp_path / "pb", chunk_rows=1000)
    s = json.loads((idx.parent / "browser.json").read_text())
    assert len(s["chunks"]) == 4 and s["n_trajectories"] == 3400
    fa = {j["id"] for k, j in enumerate(judg) if j["verdict"] == "valid" and not pb[k].annotation.is_valid}
    assert s["flags"]["false_accept"] == len(fa) > 0
    _open_index(page, idx)
    assert "rows 1–200 of 3400 (page 1 of 17)" in page.inner_text("#pager-top")
    page.click("#filter-false_accept")
    shown = set()
    while True:
        shown |= set(_shown_ids(page))
        if page.is_disabled("#pager-top button.next"):
            break
        page.click("#pager-top button.next")
    assert shown == fa
    page.screenshot(path=str(ARTIFACTS / "processbench-index.png"))
    # a ProcessBench record with a labelled fatal step, found through the split filter and search
    target = next(t for t in pb if t.split == "olympiadbench" and t.annotation.first_fatal_error_step >= 2)
    _open_index(page, idx, f"#split=olympiadbench&q={target.id}")
    page.click(f"#rows tr[data-id='{target.id}'] a")
    page.wait_for_selector("body.trajectory[data-math]")  # after trajectory.js ran
    fatal = target.annotation.first_fatal_error_step
    assert page.eval_on_selector_all(".step.fatal", "e => e.map(x => x.dataset.step)") == [str(fatal)]
    assert page.locator(".step").count() == len(target.proof_steps)
    assert page.locator(".katex").count() > 0
    page.screenshot(path=str(ARTIFACTS / "processbench-trajectory.png"), full_page=True)
    _no_network(page)

    opc = load_gold(shared_data / "opc_test" / "test.parquet")
    assert len(opc) == 434
    idx = write_browser(_replayed_judgments(opc), opc, tmp_path / "opc")
    page.requests.clear()
    _open_index(page, idx, "#p=3")
    assert "rows 401–434 of 434 (page 3 of 3)" in page.inner_text("#pager-top")
    first = _shown_ids(page)[0]
    page.click("#rows a")
    page.wait_for_selector("body.trajectory[data-math]")  # after trajectory.js ran
    assert page.inner_text("#traj-id") == first
    assert "fatal step not located" in page.inner_text("#gold") or page.inner_text("#gold").startswith("valid")
    assert page.locator(".katex").count() > 0
    page.screenshot(path=str(ARTIFACTS / "opc-trajectory.png"), full_page=True)
    _no_network(page)


def test_page_names_are_unique_and_safe():
    ids = ["a/b", "a_b", "a b", "../x", "é", "x" * 300]
    names = [page_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    assert all("/" not in n and not n.startswith(".") and len(n) < 90 for n in names)
    assert os.path.basename(page_name("../../etc/passwd")) == page_name("../../etc/passwd")


def test_evaluation_report_links_the_browser(data, tmp_path):
    """Every eval.score report builds and links the browser of its predictions (write_browser_for_run);
    an explicit ``browser_index`` is linked as given."""
    from eval.score import ScoreConfig, run

    gold, judg = data  # the first 6 are annotated (eval.score requires gold annotations)
    write_jsonl(tmp_path / "gold.jsonl", gold[:6])
    write_jsonl(tmp_path / "pred.jsonl", judg[:6])
    args = [f"gold={tmp_path / 'gold.jsonl'}", f"predictions={tmp_path / 'pred.jsonl'}", "bootstrap_n=20"]
    run(compose("score", ScoreConfig, args + [f"out={tmp_path / 'run'}"]))
    assert "(browser/index.html)" in (tmp_path / "run" / "report.md").read_text()
    s = json.loads((tmp_path / "run" / "browser" / "browser.json").read_text())
    assert (s["n_trajectories"], s["skipped"], s["flags"]["false_accept"]) == (6, 0, 1)
    assert (tmp_path / "run" / "browser" / "t" / page_name("t-fa")).is_file()

    other = write_browser(judg[:6], [ProofTrajectory.from_dict(g) for g in gold[:6]], tmp_path / "elsewhere")
    run(compose("score", ScoreConfig, args + [f"out={tmp_path / 'run2'}", f"browser_index={other}"]))
    assert "(../elsewhere/index.html)" in (tmp_path / "run2" / "report.md").read_text()
    assert not (tmp_path / "run2" / "browser").exists()


def test_rows_written_by_the_judge_and_verifierbench(tmp_path, page):
    """Rows in the exact layout of verifier.judgment.Judgment.to_row + eval.verifierbench.meta_fields."""
    from eval.browse import write_browser_for_run
    from eval.verifierbench import meta_fields
    from verifier.aggregate import AggregationPolicy, aggregate
    from verifier.judgment import Judgment
    from verifier.meta_verifier import RuleMetaVerifier
    from verifier.parser import parse_verification

    steps = ["Let $n$ be even.", "Then $n^2$ is odd.", "Done."]
    traj = ProofTrajectory.from_dict(_traj("j-1", steps, fatal=1))
    texts = [format_verification("invalid", 1, "Step 1: the square of an even number is even."),
             format_verification("valid", -1, "Fine."), "no answer block, ran out of tokens"]
    outs = [parse_verification(t, n_steps=3) for t in texts]
    j = Judgment("j-1", aggregate(outs, AggregationPolicy(n=3)), outs, seeds=[7, 8, 9],
                 completion_tokens=[40, 12, 64], n=3, model="tiny-lora")
    row = j.to_row()
    row.update(meta_fields(RuleMetaVerifier().grade(traj, outs[0]), 0))
    row["problem_id"] = traj.problem_id
    write_jsonl(tmp_path / "judgments.jsonl", [row, {"id": "not-in-gold", "verdict": "valid"}])
    idx = write_browser_for_run(tmp_path / "judgments.jsonl", [traj], tmp_path / "browser", title="VB")
    s = json.loads((idx.parent / "browser.json").read_text())
    assert (s["n_trajectories"], s["skipped"]) == (1, 1) and "not-in-gold" in s["errors"][0]
    assert set(s["flags"]) and s["flags"]["parse_failure"] == 1 and s["flags"]["disagreement"] == 1
    page.goto((idx.parent / "t" / page_name("j-1")).as_uri())
    assert page.inner_text("#verdict") == "invalid, first error at step 1"
    assert page.inner_text("#meta-grade") == "EXACT_MATCH"
    assert "the square of an even number is even" in page.inner_text("#pass-0 .rationale")
    assert "meta: EXACT_MATCH" in page.inner_text("#pass-0") and "seed 7 · 40 tokens" in page.inner_text("#pass-0")
    assert "unparsed (no_answer_block" in page.inner_text("#pass-2")
    assert page.inner_text("#judge") == "policy pessimistic, 3 of n=3 passes run, model tiny-lora"
    page.screenshot(path=str(ARTIFACTS / "trajectory-judge-rows.png"), full_page=True)
    _no_network(page)
