"""One reference: ``--help`` shows the command's own config groups."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def help_of(module: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", module, "--help", *args], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def groups_of(help_text: str) -> list[str]:
    """The lines of the help's config groups section."""
    section = re.split(r"== Config(?:uration)? groups ==", help_text)[1].split("== Config ==")[0]  # Hydra's: "uration"
    return [ln for ln in section.splitlines()[2:] if ln.strip()]


def test_help_lists_only_the_commands_own_config_groups():
    judge = help_of("eval.judge")  # before: every group of configs/ (experiment, model, profile, sft_profile ...)
    assert groups_of(judge) == ["judge: default (options: default)"], judge[:800]
    assert "docs/reference.md" in judge and "input: ???" in judge  # the composed config is still shown
    score = help_of("eval.score", "ci_level=0.9")  # no groups; overrides (a renamed key too) still apply
    assert groups_of(score) == ["(none: every key is set directly)"] and "level: 0.9" in score
