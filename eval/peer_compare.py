"""The peer comparison of ``make bench-judge``: our judging client against inspect-ai on one server.

Pure helpers (no inspect-ai import: the peer runs in ``.venv-peer`` as a subprocess, ``bench/peer_inspect.py``):
the peer's completions are parsed with our one parser (``verifier.parser.parse_completion``) and aggregated with
our 8-pass pessimism (``verifier.aggregate``), so both sides decide by the same rule; ``agreement`` compares the
decisions; ``line_values`` are ``make bench-judge``'s contract line (the peer keys appended at the end).
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from verifier.aggregate import AggregationPolicy, aggregate
from verifier.parser import parse_completion
from verifier.records import Verdict

# inspect-ai's ``StopReason`` -> the OpenAI finish_reason our parser reads (a budget cut is ``length``)
PEER_SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "peer_inspect.py"  # runs in the peer's venv
STOP_REASONS = {"max_tokens": "length", "model_length": "length", "stop": "stop"}


def peer_passes(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The peer's completions per proof id, ordered by epoch (epoch e is our pass e - 1)."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: (str(r["id"]), int(r["epoch"]))):
        out.setdefault(str(r["id"]), []).append(r)
    return out


def peer_decisions(rows: Sequence[Mapping[str, Any]], n_steps: Mapping[str, int], n: int = 8,
                   policy: AggregationPolicy | None = None) -> dict[str, Verdict | None]:
    """Each proof's decision from the peer's completions, by our parser and our aggregation.

    A proof with fewer than ``n`` completions, or any failed completion, has no decision (None), as our runner
    leaves a judgment with a failed request incomplete.
    """
    policy = policy or AggregationPolicy(n=n)
    out: dict[str, Verdict | None] = {}
    for pid, passes in peer_passes(rows).items():
        if len(passes) != n or any(p.get("error") for p in passes):
            out[pid] = None
            continue
        parsed = [parse_completion(p.get("text") or "", STOP_REASONS.get(p.get("finish_reason") or "", "stop"),
                                   "", n_steps.get(pid)) for p in passes]
        out[pid] = aggregate(parsed, policy).verdict
    return out


def agreement(ours: Mapping[str, Verdict | None], peer: Mapping[str, Verdict | None]) -> float:
    """Fraction of our proofs whose peer decision is the same; a proof the peer did not decide counts as a
    disagreement. NaN when there is nothing to compare."""
    if not ours:
        return math.nan
    same = sum(1 for pid, v in ours.items() if v is not None and peer.get(pid) == v)
    return same / len(ours)


def pass_text_agreement(ours: Mapping[str, Sequence[str]], rows: Sequence[Mapping[str, Any]]) -> float:
    """Fraction of passes (proof, pass index) whose completion text is byte-identical on both sides."""
    peer = {pid: [p.get("text") or "" for p in ps] for pid, ps in peer_passes(rows).items()}
    total = sum(len(t) for t in ours.values())
    if not total:
        return math.nan
    same = sum(1 for pid, texts in ours.items() for i, t in enumerate(texts)
               if i < len(peer.get(pid, [])) and peer[pid][i] == t)
    return same / total


def run_peer(python: str | Path, spec: Mapping[str, Any], work: Path, timeout_s: float = 1800) -> dict[str, Any]:
    """Run ``bench/peer_inspect.py`` under ``python`` (the peer's virtualenv); ``process_s`` is the whole
    subprocess (interpreter start, imports, eval, log, exit)."""
    work.mkdir(parents=True, exist_ok=True)
    inp, out = work / "peer_in.json", work / "peer_out.json"
    inp.write_text(json.dumps(spec))
    out.unlink(missing_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.run([str(python), str(PEER_SCRIPT), str(inp), str(out)],
                          capture_output=True, text=True, timeout=timeout_s)
    process_s = time.perf_counter() - t0
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"peer (inspect-ai) failed, rc={proc.returncode}: {proc.stderr[-2000:]}")
    res = json.loads(out.read_text())
    res["process_s"] = process_s
    return res


LINE_FORMATS = {"judge_vs_raw": ".3f", "judge_vs_naive": ".2f", "early_stop_token_saving": ".3f",
                "two_servers_vs_one": ".2f", "vs_peer": ".2f", "peer_agreement": ".3f"}


def line_values(med: Mapping[str, float], vs_peer: float, peer_agreement: float) -> dict[str, float]:
    """The values of ``make bench-judge``'s last line (printed with ``formats=LINE_FORMATS``): the
    existing keys in their order, then ``vs_peer`` and ``peer_agreement``.

    >>> line_values({"judge_vs_raw": 0.95, "judge_vs_naive": 6.1, "early_stop_token_saving": 0.4,
    ...              "two_servers_vs_one": 1.2, "other": 0.0}, 1.7, 1.0)  # doctest: +NORMALIZE_WHITESPACE
    {'judge_vs_raw': 0.95, 'judge_vs_naive': 6.1, 'early_stop_token_saving': 0.4, 'two_servers_vs_one': 1.2,
     'vs_peer': 1.7, 'peer_agreement': 1.0}
    """
    return {**{k: med[k] for k in ("judge_vs_raw", "judge_vs_naive", "early_stop_token_saving", "two_servers_vs_one")},
            "vs_peer": vs_peer, "peer_agreement": peer_agreement}
