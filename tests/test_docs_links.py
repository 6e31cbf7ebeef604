"""Every relative markdown link (and image) in README.md, docs/*.md and reports/*.md names an existing file."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "reports").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def relative_links(page: Path) -> list[str]:
    """The link targets of a page outside fenced code blocks, without URLs and in-page anchors."""
    targets, in_fence = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            targets.append(target.split("#", 1)[0])
    return targets


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    missing = [t for t in relative_links(page) if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)}: links to missing files: {missing}"


def test_the_pages_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"README.md", "docs/README.md", "docs/training.md", "reports/README.md"} <= names


def test_a_missing_target_is_caught(tmp_path):
    page = tmp_path / "p.md"
    (tmp_path / "there.md").write_text("x")
    page.write_text("[a](there.md) [b](gone.md#x) ![c](fig.png) [d](https://x.org/y) [e](#top)\n```\n[f](nope.md)\n```\n")
    assert relative_links(page) == ["there.md", "gone.md", "fig.png"]
