"""The parts the benches share: the environment, ``key=value`` options in Hydra's override grammar (bench-prover's,
which the diagnoses reuse, among them), stage resume and the stage clock, vLLM servers, worker processes, and the
``key=value`` last line. A bench script imports this module and the library, never a sibling script.

A bench is run as a script (``python bench/NAME.py KEY=VALUE ...``), so it puts the repository on ``sys.path``
itself, in one line, and then imports this module::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.common import REPO, environment, last_line

    environment(wandb=True)  # before importing torch, transformers or vLLM

The last line of a bench's output is its contract (the Makefile, CI and reports read it): ``key=value`` pairs
separated by one space, keys and number formats fixed per bench (``tests/test_bench_last_lines.py``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# stage resume lives in the library (training.stages); re-exported for the benches
from training.stages import done_stage, mark_done, settings_of  # noqa: F401
from training.tiny_task import ProverBudget

# a bad option or input is one line and exit code 2, as in every command of the project: a bench raises InputError and
# its ``__main__`` runs ``run_command(PROG, main)`` (re-exported for the benches); a failed run keeps exit code 1
from verifier.errors import InputError, run_command  # noqa: F401

REPO = Path(__file__).resolve().parents[1]

ENVIRONMENT = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
WANDB_OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}


def environment(wandb: bool = False, **extra: str) -> None:
    """Set the benches' environment defaults (a value the caller already set wins): one OpenMP thread, no
    tokenizer parallelism, offline Hugging Face hub; ``wandb``: W&B offline and silent; ``extra``: more names."""
    for name, value in {**ENVIRONMENT, **(WANDB_OFFLINE if wandb else {}), **extra}.items():
        os.environ.setdefault(name, value)


def _overrides(argv: list[str]) -> list[Any]:
    """``argv`` parsed by Hydra's override grammar (``hydra.core.override_parser``: the grammar of every Hydra command
    of the project); an ill-formed option, ``+key``, ``~key`` or an empty key is one ``InputError`` naming it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser, out = OverridesParser.create(), []
    for a in argv:
        try:
            o = parser.parse_overrides([a])[0]
        except HydraException as e:
            why = str(e).splitlines()[0] if "missing EQUAL" not in str(e) else "expected key=value"
            raise InputError(f"option {a!r}: {why} (Hydra's override grammar: quote a value with spaces, '=' or "
                             "brackets, e.g. out='runs/a=b')") from None
        if o.is_add() or o.is_force_add() or o.is_delete() or o.package or not o.key_or_group:
            raise InputError(f"option {a!r}: a bench takes key=value (no +key, ~key, key@package or empty key)")
        out.append(o)
    return out


def option_key(arg: str) -> str:
    """The key of one ``key=value`` option, read by Hydra's override grammar (a bench that hands some options to
    another parser or process splits them by key with this); an ill-formed option is one ``InputError``."""
    return _overrides([arg])[0].key_or_group


def _value(o: Any, typ: str) -> Any:
    """One override's value for a dataclass field of type ``typ``: a string field keeps the text as written
    (``lr=3e-5`` stays ``"3e-5"``, a comma list ``lrs=1e-4,3e-4`` or ``[1e-4,3e-4]`` one string ``"1e-4,3e-4"``,
    a quoted value unquoted); other fields get the typed value (int, float, bool, ``null``), which OmegaConf checks."""
    raw = o.input_line.partition("=")[2].strip()
    if o.is_sweep_override():
        if type(o._value).__name__ != "ChoiceSweep" or "str" not in typ:
            raise InputError(f"option {o.input_line}: expected {typ} (a bench runs no Hydra sweep; a comma list is one "
                             "string option's value)")
        return raw if not ("'" in raw or '"' in raw) else ",".join(getattr(x, "text", str(x)) for x in o._value.list)
    v = o.value()
    if "None" in typ and (v is None or (isinstance(v, str) and v.lower() in ("none", ""))):  # an optional key: null
        return None
    if "str" in typ and isinstance(v, list):
        return raw[1:-1].replace(" ", "") if not ("'" in raw or '"' in raw) else ",".join(map(str, v))
    if "str" in typ and isinstance(v, (bool, int, float)):
        return raw  # the text as written: a folder name or a log keeps ``3e-5``, not ``3e-05``
    return v


def set_options(cfg: Any, argv: list[str], sort: bool = False) -> Any:
    """``key=value`` options onto the dataclass ``cfg`` (in place, returned), read by Hydra's override grammar (as the
    library's Hydra commands read theirs: ``null``, quoting, ``[a,b]`` lists) and typed as Hydra types them: each
    value checked against the dataclass as an OmegaConf structured config (Hydra's config layer). An unknown key
    is one ``InputError``, ``unknown option ...; options: ...`` (the field names, ``sort``: in alphabetical
    order); a value of the wrong type or ill-formed is one naming the option. A comma-separated value is one
    string (``lrs=1e-4,3e-4``: a bench runs its own grid, no Hydra sweep)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    types = {f.name: str(f.type) for f in dataclasses.fields(cfg)}
    conf = OmegaConf.structured(cfg)
    for a in argv:
        if a.partition("=")[0] not in types:  # the unknown key first: the one error a typo gets
            raise InputError(f"unknown option {a.partition('=')[0]!r}; options: "
                             f"{', '.join(sorted(types) if sort else types)}")
        o = _overrides([a])[0]
        try:
            conf = OmegaConf.merge(conf, {o.key_or_group: _value(o, types[o.key_or_group])})
        except (OmegaConfBaseException, ValueError):
            raise InputError(f"option {o.key_or_group}={a.partition('=')[2]!r}: expected {types[o.key_or_group]}"
                             ) from None
    for k, value in dataclasses.asdict(OmegaConf.to_object(conf)).items():
        setattr(cfg, k, value)
    return cfg


def split_options(argv: list[str], cfg: Any) -> tuple[Any, list[str]]:
    """The options of ``argv`` whose key is a field of the dataclass ``cfg`` set on it (``set_options``), and the
    rest, in order, for another parser (a diagnosis's own options beside bench-prover's)."""
    names = {f.name for f in dataclasses.fields(cfg)}
    mine = [a for a in argv if option_key(a) in names]
    return set_options(cfg, mine), [a for a in argv if a not in mine]


def run_workers(jobs: list[tuple[str, str, list[str]]], out: Path, log: Callable[[str], None]) -> list[str]:
    """Run a bench's worker processes at once, each ``python ARGV`` (log: ``out/worker<k>.log``), ``jobs`` being
    (what the log line names, what a failure names, ARGV); wait for all; the failures, ``<what> (exit <rc>)``."""
    procs = []
    for k, (what, name, argv) in enumerate(jobs):
        f = open(out / f"worker{k}.log", "w")  # noqa: SIM115 (closed after the worker exits)
        procs.append((name, f, subprocess.Popen([sys.executable, *argv], stdout=f, stderr=subprocess.STDOUT)))
        log(f"worker {k}: {what} (log {out / f'worker{k}.log'})")
    failed = []
    for name, f, proc in procs:
        if proc.wait() != 0:
            failed.append(f"{name} (exit {proc.returncode})")
        f.close()
    return failed


class Servers:
    """The vLLM servers of a bench (``verifier.serve``), one per served name, each started on first use and logging
    to ``out/vllm-<name>.log``; ``stop`` stops them all."""

    def __init__(self, out: Path, max_len: int):
        self.out, self.max_len, self.running = out, max_len, {}

    def endpoint(self, name: str, model: str | Path) -> Any:
        """The endpoint of the server of ``model`` served as ``name`` (started here unless it runs)."""
        from verifier.config import EndpointConfig
        from verifier.serve import ServeConfig, VLLMServer, free_port

        if name not in self.running:
            self.running[name] = VLLMServer(ServeConfig(
                model=str(model), served_model_name=name, port=free_port(), api_key=None,
                log_file=str(self.out / f"vllm-{name}.log"), max_model_len=self.max_len,
                max_num_batched_tokens=self.max_len)).start()
        return EndpointConfig(base_url=self.running[name].base_url, model=name, max_concurrency=64, timeout_s=300,
                              max_retries=2)

    def stop(self) -> None:
        for s in self.running.values():
            s.stop()
        self.running.clear()


def torch_threads() -> None:
    """Torch on ``OMP_NUM_THREADS`` threads (one unless the caller set more); imports torch."""
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))


class Clock:
    """A bench's stage timings: ``tick(name, t0)`` keeps the seconds since ``t0`` in ``timings`` and prints them
    with the total since the clock started, as ``[TAG] name: <s>s (total <s>s)``."""

    def __init__(self, tag: str):
        self.tag, self.start, self.timings = tag, time.monotonic(), {}

    def tick(self, name: str, t0: float) -> None:
        self.timings[name] = round(time.monotonic() - t0, 1)
        print(f"[{self.tag}] {name}: {self.timings[name]:.0f}s (total {time.monotonic() - self.start:.0f}s)",
              flush=True)


# ------------------------------------------------------------------ the last line
def key_values(values: Mapping[str, Any], fmt: str = ".4f", formats: Mapping[str, str] | None = None) -> str:
    """``key=value`` pairs in the order of ``values``: strings as they are, numbers with ``formats[key]`` or
    ``fmt`` (an integer too: give its key ``"d"``); ``None`` is ``nan``.

    >>> key_values({"speedup": 2.345, "rows": 7, "ci_low": None, "agreement": 0.5}, ".2f", {"rows": "d", "agreement": ".3f"})
    'speedup=2.35 rows=7 ci_low=nan agreement=0.500'
    """
    formats = formats or {}

    def one(key: str, v: Any) -> str:
        if isinstance(v, str):
            return v
        return format(math.nan if v is None else v, formats.get(key, fmt))

    return " ".join(f"{k}={one(k, v)}" for k, v in values.items())


def last_line(values: Mapping[str, Any], fmt: str = ".4f", formats: Mapping[str, str] | None = None) -> str:
    """Print a bench's last line (``key_values``) and return it."""
    line = key_values(values, fmt, formats)
    print(line, flush=True)
    return line


# ------------------------------------------------------------------ bench-prover's options
@dataclass
class ProverHackingConfig(ProverBudget):
    """``make bench-prover``'s options (``make diagnose-control`` and ``make diagnose-prover`` take them too). The
    model, task and prover budget: ``training.tiny_task.ProverBudget`` (the demo's tiny model, 3-step chains
    of one-digit operands); the prover SFT's 2000-step schedule, the GRPO budget and temperature are its defaults."""

    out: str = "runs/bench_prover"
    seed: int = 0
    subjects: str = "arithmetic"
    n_grpo: int = 256  # GRPO problems (fresh)
    # held-out problems asked for (disjoint from every training set; 214 remain with these knobs). 45 could not resolve
    # the gold arm's gain (+3.0 [-0.8, +7.4]); 207 fresh ones showed it, +6.2 [+4.1, +8.6]
    # (reports/prover_2026-12-07_positive_control_fresh.md)
    n_eval: int = 250
    # skip the first N held-out problems (those an earlier registered run has read); the candidates drawn grow with it
    held_out_skip: int = 0
    # prover SFT: a 2000-step schedule, the warm start its checkpoint 1200: the most GRPO groups with a mixed gold
    # reward (31/48 dev problems; 43.5% true at T 0.5; 12/48 at step 800, 11/48 at 1600; make diagnose-control,
    # reports/prover_2026-12-06_positive_control.md)
    prover_sft_checkpoint: int = 1200  # the warm start: this checkpoint of the SFT schedule (0: its final weights)
    # verifier (step 2)
    verifier: str = ""  # a trained verifier folder (e.g. runs/demo/grpo/final); empty: SFT one here
    prover: str = ""  # an SFT prover folder (e.g. a make diagnose-control checkpoint); empty: SFT one here
    n_verifier_sft: int = 3600
    # parsed passes at judge_temperature 0.5: 74% after 100 steps, 98% after 200, 100% after 300 (docs/prover.md)
    verifier_sft_steps: int = 300
    verifier_sft_lr: float = 3e-3
    verifier_template: str = "verify_compact"
    verifier_max_tokens: int = 112
    # the demo's evaluation temperature: at 1.0, 8-14% of the SFT verifier's passes do not parse and it accepts
    # 62% of gold proofs per pass (86% at 0.5); make diagnose-prover, docs/prover.md
    judge_temperature: float = 0.5
    # GRPO arms (the same budget for each): 8 samples per problem (make diagnose-prover: 4 gave ~1 group with a
    # gradient per step). 16 problems per step at lr 3e-5, 24 steps: the positive control (make diagnose-control,
    # on dev GRPO problems: +7.6 [+3.1, +13.0] true points with the gold reward; 4 problems per step at lr 1e-4 to
    # 3e-3, the 3 Dec budget, lowered the true rate: Adam's steps on one to three informative groups are noise).
    # The prover's GRPO temperature: groups of 8 with a mixed gold reward (a gradient), GRPO problems: 10/64 at 1.0,
    # 16/64 at 0.7, 21/64 at 0.5 (make diagnose-prover, docs/prover.md)
    arms: str = "pass1,mean8,pess8,pool,gold"
    # held-out evaluation
    refine_rounds: int = 1
    # the pool arm: the verifier and pool_size - 1 more trained alike from other random inits and SFT seeds, each
    # judging eval_passes // pool_size passes, all of which must accept (pess8's judge calls over different models)
    pool_size: int = 4
    eval_proofs: int = 8  # proofs sampled per held-out problem (each judged, checked; clustered by problem)
    # the gold arm (the exact checker as reward: the positive control) with these GRPO seeds, each from the same
    # SFT prover; its row pools the seeds and its CI resamples problems and seeds
    gold_seeds: str = "0,1,2"
    bootstrap_n: int = 200


PROVER_ARMS = {"pass1": ("verifier", 1, "pessimistic"), "mean8": ("verifier", 8, "mean"),
        "pess8": ("verifier", 8, "pessimistic"), "pool": ("verifier", 0, "pessimistic"),  # 0: eval_passes // pool_size
        "gold": ("gold", 8, "pessimistic")}


def prover_options(argv: list[str], cfg: ProverHackingConfig) -> ProverHackingConfig:
    """``key=value`` options onto ``cfg``; an unknown or ill-typed key, or a bad arm, seed list or pool size, is one
    clear error."""
    cfg = set_options(dataclasses.replace(cfg), argv)
    bad = [a for a in cfg.arms.split(",") if a not in PROVER_ARMS]
    if bad or ("pess8" not in cfg.arms.split(",") and cfg.arms != "gold"):
        raise InputError(f"arms: a subset of {list(PROVER_ARMS)} that includes pess8, or gold alone (the positive control; "
                         f"the pess8 keys print nan) (got {cfg.arms!r})")
    try:
        seeds = [int(x) for x in cfg.gold_seeds.split(",")]
    except ValueError:
        raise InputError(f"gold_seeds: integers separated by commas (got {cfg.gold_seeds!r})") from None
    if "pool" in cfg.arms.split(",") and (cfg.pool_size < 2 or cfg.eval_passes % cfg.pool_size):
        raise InputError(f"pool_size: at least 2 and a divisor of eval_passes={cfg.eval_passes} (got {cfg.pool_size})")
    if not 0 <= cfg.prover_sft_checkpoint <= cfg.prover_sft_steps:
        raise InputError(f"prover_sft_checkpoint: 0 (the final weights) or a step <= prover_sft_steps "
                         f"(got {cfg.prover_sft_checkpoint})")
    if len(set(seeds)) != len(seeds) or cfg.eval_proofs < 1:
        raise InputError(f"gold_seeds: distinct seeds; eval_proofs >= 1 (got {cfg.gold_seeds!r}, {cfg.eval_proofs})")
    return cfg
