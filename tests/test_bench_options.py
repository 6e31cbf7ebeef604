"""Every bench reads ``key=value`` options through the one parser (``bench.common.set_options``), and a user's
mistake there is one line and exit code 2, as in every other command of the project (``verifier.errors``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


BAD_OPTION = [("bench_prover.py", "bench-prover"), ("bench_loop.py", "bench-loop"), ("bench_real.py", "bench-real"),
              ("bench_learning.py", "bench-learning"), ("bench_reward.py", "bench-reward"),
              ("bench_train.py", "bench-train"), ("bench_judge.py", "bench-judge"),
              ("bench_nemo_reward.py", "bench-nemo-reward"), ("bench_ladder.py", "bench-ladder"),
              ("diagnose_control.py", "diagnose-control"), ("diagnose_prover.py", "diagnose-prover"),
              ("diagnose_autolabel.py", "diagnose-autolabel"), ("step_rule.py", "step-rule"),
              ("bench_select.py", "bench-select")]


@pytest.mark.parametrize(("script", "prog"), BAD_OPTION)
def test_a_bad_option_is_one_line_and_exit_2(script, prog):
    """Every bench takes ``key=value`` options through ``bench.common.set_options``: a mistyped key ends in one line
    ``PROG: error: unknown option ...`` and exit code 2 (the project's rule for a user's mistake), no traceback,
    before any work."""
    r = subprocess.run([sys.executable, str(REPO / "bench" / script), "stepz=3"], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-1500:]
    assert r.stderr.strip().splitlines()[-1].startswith(f"{prog}: error: unknown option 'stepz'"), r.stderr[-500:]


def test_every_bench_entry_reports_user_errors_in_one_line():
    """A bench that raises ``InputError`` (or reads options) runs its ``main`` through ``run_command``; no bench
    parses its command line another way."""
    for path in sorted((REPO / "bench").glob("*.py")):
        text = path.read_text()
        assert "argparse" not in text, path.name
        if path.name != "common.py" and ("InputError(" in text or "set_options(" in text or "prover_options(" in text):
            assert 'if __name__ == "__main__":\n    run_command(' in text, path.name


def test_options_are_typed_as_hydra_types_them():
    """``set_options`` reads values as OmegaConf (Hydra's config layer) does and checks them against the dataclass:
    ints, floats, bools and ``null`` typed, a comma list kept as one string, a wrong type one error naming it."""
    from dataclasses import dataclass

    from bench.common import set_options
    from verifier.errors import InputError

    @dataclass
    class Opts:
        steps: int = 1
        lr: float = 1e-4
        diagnose: bool = False
        lrs: str = "1e-4"
        init_from: str | None = "x"
        out: str = "runs/a"

    o = set_options(Opts(), ["steps=12", "lr=3e-5", "diagnose=true", "lrs=1e-4,3e-4", "init_from=null",
                             "out='runs/b=c'"])
    assert (o.steps, o.lr, o.diagnose, o.lrs, o.init_from, o.out) == (12, 3e-5, True, "1e-4,3e-4", None, "runs/b=c")
    assert set_options(Opts(), ["init_from="]).init_from is None and set_options(Opts(), ["lr=1"]).lr == 1.0
    assert set_options(Opts(), ["lrs="]).lrs == ""
    for bad, what in (("steps=1.5", "option steps='1.5': expected int"), ("diagnose=maybe", "expected bool"), ("steps=", "option steps='': expected int"),
                      ("out=null", "option out='null'"), ("stepz=1", "unknown option 'stepz'; options: steps, lr")):
        with pytest.raises(InputError, match=what.replace("(", r"\(")):
            set_options(Opts(), [bad])


def test_options_follow_hydras_override_grammar():
    """Options are read by Hydra's override grammar, as the library's Hydra commands read theirs: quoting, ``[a,b]``
    lists, a string option kept as written (``lr`` text ``3e-5`` names folders), a comma list one string (a bench
    runs its own grid, no sweep); an ill-formed option, ``+key``, ``~key`` or a sweep of a number is one error naming
    it. ``option_key`` and ``split_options`` split a command's options by key the same way."""
    from dataclasses import dataclass

    from bench.common import option_key, set_options, split_options
    from verifier.errors import InputError

    @dataclass
    class Opts:
        steps: int = 1
        lrs: str = "1e-4"
        out: str = "runs/a"

    o = set_options(Opts(), ["out='runs/a b=c'", "lrs=[1e-4, 3e-5]", "steps=-2"])
    assert (o.out, o.lrs, o.steps) == ("runs/a b=c", "1e-4,3e-5", -2)
    assert set_options(Opts(), ["lrs=3e-5"]).lrs == "3e-5" and set_options(Opts(), ["lrs=0,3,4"]).lrs == "0,3,4"
    for bad, what in (("out=runs/b=c", "option 'out=runs/b=c': mismatched input '='"),
                      ("lrs=[1,", "option 'lrs=\\[1,': no viable alternative"), ("steps", "option 'steps': expected key=value"),
                      ("steps=1,2", "option steps='1,2': expected int"), ("+steps=2", "unknown option '\\+steps'"),
                      ("~steps", "unknown option '~steps'")):
        with pytest.raises(InputError, match=what):
            set_options(Opts(), [bad])
    assert option_key("localisation.steps=3,4") == "localisation.steps"
    with pytest.raises(InputError, match="option 'out=a=b'"):
        option_key("out=a=b")  # a split by key reads the grammar too: the error comes before any work

    @dataclass
    class Own:
        every: int = 100
        warm: str = "best"

    own, rest = split_options(["steps=3", "warm=best,1200", "every=400", "lrs=1e-4,3e-4"], Own())
    assert (own.every, own.warm, rest) == (400, "best,1200", ["steps=3", "lrs=1e-4,3e-4"])
