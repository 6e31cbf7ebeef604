"""The annotation round trip through a REAL Label Studio server (appendix C.1, C.4, C.5).

Label Studio runs as a separate program from its own virtualenv (``make label-studio`` ->
``.venv-labelstudio``; its pins never touch ours), on localhost with SQLite, a free port and a
data dir under the pytest tmp dir. Our side talks to it over its HTTP API only (``requests``): create a
project with our labeling config, import the exported tasks, submit annotations through the
API as the annotator's browser does (one task is labelled on the real labeling page in headless
Chromium), export JSON, ingest, compare. A screenshot of the labeling page is saved to
``test-artifacts/label-studio/labeling-page.png``. The server is stopped
(its whole process group) at the end.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import free_port
from test_annotate import GOOD, ls_result, make_queue

from data_pipeline.annotate import AnnotateConfig, export
from data_pipeline.ingest import IngestConfig, ingest
from verifier.records import Annotation

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
LS_VENV = REPO / ".venv-labelstudio"
ARTIFACTS = REPO / "test-artifacts" / "label-studio"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
USER = "annotator@example.com"
BAD = {"reviewer_comment": "Recoverable after fatal.", "first_fatal_error_step": 0, "recoverable_error_steps": "1"}


@pytest.fixture(scope="module")
def label_studio(tmp_path_factory):
    """A local Label Studio server (SQLite) with a user and an API token made non-interactively."""
    exe = LS_VENV / "bin" / "label-studio"
    if not exe.exists():
        pytest.fail(f"{exe} is missing: run `make label-studio` (Label Studio in its own virtualenv)")
    root = tmp_path_factory.mktemp("label-studio")
    # the password starts with "-" on purpose: token_urlsafe makes one 1 time in 64, and one passed as argv
    # (`--password -x...`) made Label Studio exit with a usage error and failed CI
    port, token, password = free_port(), secrets.token_hex(20), "-" + secrets.token_urlsafe(16)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(LABEL_STUDIO_BASE_DATA_DIR=str(root), LATEST_VERSION_CHECK="false", SENTRY_DSN="",
               FRONTEND_SENTRY_DSN="", COLLECT_ANALYTICS="false", LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK="true",
               # credentials through Label Studio's environment, not argv: off the process list, and a password
               # that starts with "-" is not read as an option
               LABEL_STUDIO_USERNAME=USER, LABEL_STUDIO_PASSWORD=password, LABEL_STUDIO_USER_TOKEN=token)
    log = open(root / "server.log", "w")  # noqa: SIM115  (closed in the finally below, after the server stops)
    proc = subprocess.Popen(
        [str(exe), "start", "--no-browser", "--data-dir", str(root), "--port", str(port), "--internal-host",
         "127.0.0.1", "--enable-legacy-api-token", "--log-level", "WARNING"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 300
        while True:
            if proc.poll() is not None:
                pytest.fail(f"Label Studio exited ({proc.returncode}):\n{(root / 'server.log').read_text()[-3000:]}")
            try:
                if urllib.request.urlopen(url + "/health", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                pytest.fail(f"Label Studio did not start:\n{(root / 'server.log').read_text()[-3000:]}")
            time.sleep(1)
        yield {"url": url, "token": token, "password": password, "root": root}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
        with pytest.raises(ProcessLookupError):  # no orphans: the whole process group is gone
            os.killpg(proc.pid, 0)


class LabelStudioAPI:
    """The few calls of Label Studio's REST API we need (token auth)."""

    def __init__(self, url: str, token: str):
        import requests

        self.url, self.s = url, requests.Session()
        self.s.headers["Authorization"] = f"Token {token}"

    def call(self, method: str, path: str, **kw):
        r = self.s.request(method, self.url + path, timeout=120, **kw)
        assert r.ok, f"{method} {path}: {r.status_code} {r.text[:2000]}"
        return r.json()


def test_round_trip_through_label_studio(label_studio, tmp_path):
    rows = make_queue(tmp_path, n=5)
    out = export(AnnotateConfig(queue=str(tmp_path / "sel" / "annotation_queue.jsonl"), out=str(tmp_path / "ls")))
    api = LabelStudioAPI(label_studio["url"], label_studio["token"])
    project = api.call("POST", "/api/projects", json={"title": "Proof annotation (test)",
                                                      "label_config": (out / "label_config.xml").read_text()})
    tasks = json.loads((out / "tasks.json").read_text())
    imported = api.call("POST", f"/api/projects/{project['id']}/import", json=tasks)
    assert imported["task_count"] == len(rows)
    listed = api.call("GET", "/api/tasks", params={"project": project["id"], "page_size": 100})
    listed = listed["tasks"] if isinstance(listed, dict) else listed
    task_of = {t["data"]["trajectory_id"]: t["id"] for t in listed}
    assert set(task_of) == {r["id"] for r in rows}

    # the annotator labels the first task on the real labeling page (headless Chromium; screenshot kept) ...
    submitted = dict(zip([r["id"] for r in rows], GOOD + [BAD]))
    _annotate_in_browser(label_studio, project["id"], task_of[rows[0]["id"]], rows[0], submitted[rows[0]["id"]], tmp_path)
    # ... and the others through the API the page posts to (/api/tasks/<id>/annotations)
    for rid, fields in list(submitted.items())[1:]:
        api.call("POST", f"/api/tasks/{task_of[rid]}/annotations",
                 json={"result": ls_result(fields), "was_cancelled": False, "lead_time": 12.5})

    export_path = tmp_path / "export.json"
    exported = api.call("GET", f"/api/projects/{project['id']}/export",
                        params={"exportType": "JSON", "download_all_tasks": "true"})
    export_path.write_text(json.dumps(exported))
    r = ingest(IngestConfig(input=str(export_path), out=str(tmp_path / "ing"), on_error="skip", progress=False))
    # the inconsistent annotation is rejected, naming the Label Studio task and the field
    assert len(r.errors) == 1 and r.errors[0].field == "annotation.recoverable_error_steps"
    assert f"(Label Studio task {task_of[rows[4]['id']]})" in str(r.errors[0]), str(r.errors[0])
    got = {t.id: t for t in r.records + r.excluded}
    assert set(got) == {r["id"] for r in rows[:4]} and len(r.excluded) == 1
    for row in rows[:4]:
        t = got[row["id"]]
        expected = Annotation.from_dict(submitted[row["id"]], row["id"], n_steps=len(row["proof_steps"]))
        assert t.annotation == expected, (t.annotation, expected)
        assert list(t.proof_steps) == row["proof_steps"] and t.problem == row["problem"]
        assert t.meta["label_studio"]["task_id"] == task_of[row["id"]]
        assert t.meta["selection"] == row["meta"]["selection"]


def _submit_comment(page, comment: str, tries: int = 3) -> None:
    """Type the reviewer comment and submit it into the TextArea (Shift+Enter), then wait until Label Studio shows
    it as a region. Under a loaded CPU a keypress can reach the page before React has taken the filled value; CI
    once exported an empty comment that way, so the region is awaited and the typing repeated if it never shows."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    region = page.get_by_test_id("htx-textbox-content").get_by_text(comment, exact=True)
    for attempt in range(1, tries + 1):
        page.fill("textarea[name=reviewer_comment]", comment)
        page.press("textarea[name=reviewer_comment]", "Shift+Enter")
        try:
            region.first.wait_for(timeout=15_000)
            return
        except PlaywrightTimeout:
            if attempt == tries:
                raise


def _annotate_in_browser(ls, project_id: int, task_id: int, row: dict, fields: dict, tmp_path: Path) -> None:
    """Log in as the annotator, photograph the labeling page of one task, fill in the C.4 fields, submit."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make browser-deps` (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    shot = tmp_path / "labeling-page.png"
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile, sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(profile, executable_path=str(CHROMIUM), headless=True,
                                                   args=CHROMIUM_ARGS, viewport={"width": 1400, "height": 1800})
        try:
            page = ctx.new_page()
            page.goto(ls["url"] + "/user/login/")
            page.fill("input[name=email]", USER)
            page.fill("input[name=password]", ls["password"])
            page.click("button[type=submit]")
            page.wait_for_load_state("networkidle", timeout=60_000)
            page.goto(f"{ls['url']}/projects/{project_id}/data?task={task_id}")
            # what C.1 lists is on the page: problem, official solution, numbered steps, unverified references
            page.get_by_text(row["problem"]).first.wait_for(timeout=120_000)
            for text in ("Official solution", "Step 0", row["proof_steps"][0], "do not trust them by default",
                         "flagged steps", "verdict: invalid; first error step: 1"):
                page.get_by_text(text).first.wait_for(timeout=30_000)
            _submit_comment(page, fields["reviewer_comment"])
            page.fill("input[name=first_fatal_error_step]", str(fields["first_fatal_error_step"]))
            page.fill("input[name=recoverable_error_steps]", fields["recoverable_error_steps"])
            page.press("input[name=recoverable_error_steps]", "Enter")
            page.wait_for_timeout(500)
            page.screenshot(path=str(shot), full_page=True)
            with page.expect_response(lambda r: "/annotations" in r.url and r.request.method == "POST") as resp:
                page.get_by_role("button", name="Submit").click()
            assert resp.value.status == 201, resp.value.text()
        finally:
            ctx.close()
    assert shot.stat().st_size > 20_000
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, ARTIFACTS / "labeling-page.png")
