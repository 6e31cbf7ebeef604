"""Judge-harness throughput benchmark (``make bench-judge``), section 4.4 judging on vLLM.

In one process tree, on the same tiny model and the same ProcessBench prompts with n=8:

(a) raw ``vllm.LLM`` offline generation of the same requests (token ids, ``SamplingParams(n=8, seed)``);
(b) our client: ``verifier.runner.judge_trajectories`` + ``OpenAIEngine`` on our served endpoint
    (``verifier.serve.VLLMServer``, the same engine options as (a));
(c) a naive client: one request per pass (n=1), one at a time (on a subset; a rate is a rate);
(d) full 8-pass against early-stop pessimism (waves 1,1,2,4) on a mixed set: guided decoding
    forces parseable verdicts with a set accept rate, high for gold-valid proofs and low for
    gold-invalid ones (``synthetic_verdict_regex``); the realised accept rates are reported;
(e) scale-out: the judge client (b) over two servers (``endpoint.base_url=[URL1, URL2]``) against one,
    each server pinned to its own core (CPU affinity inherited from the launching thread, one OMP
    thread), on a subset of the proofs;
(f) a peer harness: the same 8-pass judging of the same proofs (same prompt, sampling, per-pass seeds and guided
    verdict regex as (d), so that decisions vary) through inspect-ai (``bench/peer_inspect.py``, run as a
    subprocess under ``.venv-peer/bin/python``: ``make peer-deps``) on the same server as our client (b);
    the peer's completions are parsed by our parser and aggregated by our pessimism (``eval/peer_compare.py``).
    Proofs per second of each side's judging call (ours: ``judge_trajectories``; the peer: inspect's ``eval``),
    interleaved within each repeat (the order alternates); the process start (interpreter and imports) of each
    side is reported apart. ``vs_peer`` = ours / the peer's proofs per second, ``peer_agreement`` = the
    fraction of proofs with the same decision on both sides.

Repeated ``repeats`` times; medians are reported. Results go to ``out`` (JSON + PNG). Options: ``key=value``
(``JudgeBenchConfig``).
The last line is the contract:
``judge_vs_raw=<b/a tokens/s> judge_vs_naive=<b/c tokens/s> early_stop_token_saving=<1 - tokens(d early)/tokens(d full)>
two_servers_vs_one=<e: tokens/s on two pinned servers / on one> vs_peer=<f: our proofs/s / inspect-ai's>
peer_agreement=<f: fraction of proofs decided alike>`` (one line).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import REPO, environment, last_line, run_command, set_options

environment(TRANSFORMERS_OFFLINE="1", VLLM_LOGGING_LEVEL="WARNING")


@dataclass
class JudgeBenchConfig:
    """``make bench-judge``'s options (``key=value``, ``bench.common.set_options``)."""

    prompts: int = 200  # ProcessBench proofs for (a), (b) and (d)
    naive_prompts: int = 6  # proofs for the naive client (c)
    d_prompts: int = 96  # proofs for the early-stop comparison (d)
    e_prompts: int = 96  # proofs for the two-servers-vs-one comparison (e)
    n: int = 8
    max_tokens: int = 32  # (a)-(c) completion tokens per pass
    repeats: int = 3
    accept_valid: int = 90  # (d) accept % for gold-valid proofs
    accept_invalid: int = 30  # (d) accept % for gold-invalid proofs
    max_model_len: int = 4096
    peer_prompts: int = 48  # proofs for the peer comparison (f)
    peer_accept: int = 90  # (f) guided accept % per pass
    peer_python: str = str(REPO / ".venv-peer" / "bin" / "python")  # the interpreter with inspect-ai (make peer-deps)
    out: str = str(REPO / "runs" / "bench_judge")


def parse_args(argv: list[str] | None = None) -> JudgeBenchConfig:
    return set_options(JudgeBenchConfig(), sys.argv[1:] if argv is None else argv)


def load_prompts(n: int):
    """Round-robin over the four ProcessBench splits, alternating gold-valid and gold-invalid proofs."""
    from verifier.formats import SHARED_DATA, load_processbench

    pools = []
    for split in ("gsm8k", "math", "olympiadbench", "omnimath"):
        recs = load_processbench(SHARED_DATA / "processbench" / f"{split}.json")
        pools.append([r for r in recs if r.gold_verdict is not None and r.gold_verdict.value == "valid"])
        pools.append([r for r in recs if r.gold_verdict is not None and r.gold_verdict.value == "invalid"])
    out, i = [], 0
    while len(out) < n and any(i < len(p) for p in pools):
        for pool in pools:
            if i < len(pool) and len(out) < n:
                out.append(pool[i])
        i += 1
    return out


@contextlib.contextmanager
def pinned(core: int):
    """Processes started inside run on ``core`` only (children inherit the launching thread's affinity)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def tree_cpus(pid: int) -> set[str]:
    """The CPU lists allowed to a process and its descendants (evidence of the pinning)."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError):
            out.add(",".join(map(str, sorted(os.sched_getaffinity(p)))))
            for children in Path(f"/proc/{p}/task").glob("*/children"):
                todo += [int(c) for c in children.read_text().split()]
    return out


def main() -> None:
    args = parse_args()
    from verifier.config import EndpointConfig
    from verifier.engine import GenerationRequest, OpenAIEngine, base_seed
    from verifier.judging import JudgeConfig, synthetic_verdict_regex
    from eval.peer_compare import LINE_FORMATS, agreement, line_values, pass_text_agreement, peer_decisions, run_peer
    from verifier.records import Verdict
    from verifier.runner import judge_trajectories, verification_item
    from verifier.offline import OfflineConfig, VLLMOfflineEngine
    from verifier.serve import ServeConfig, VLLMServer, free_port
    from verifier.templates import as_messages, verification_prompt
    from verifier.tiny_model import TinyModelConfig, build

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench_judge_"))
    model = build(TinyModelConfig(out=str(tmp / "model"), seed=0))
    trajs = load_prompts(args.prompts)
    n_valid = sum(1 for t in trajs if t.gold_verdict is not None and t.gold_verdict.value == "valid")
    print(f"bench-judge: {len(trajs)} ProcessBench proofs ({n_valid} gold-valid), n={args.n}, "
          f"max_tokens={args.max_tokens}, repeats={args.repeats}", flush=True)

    port = free_port()
    key = "bench-key"
    common = {"max_model_len": args.max_model_len, "kv_cache_memory_bytes": "256M", "max_num_seqs": 256,
                  "max_num_batched_tokens": 8192, "enforce_eager": True, "enable_chunked_prefill": False}
    server = VLLMServer(ServeConfig(model=str(model), port=port, api_key=key, log_file=str(tmp / "server.log"),
                                    omp_num_threads=1, **common)).start(wait=False)
    # (e): two more servers, each pinned to one core (all three start side by side)
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        print(f"WARNING: only {len(cores)} core available: both (e) servers share it", flush=True)
    pair = []
    for i in range(2):
        socket_port = free_port()
        with pinned(cores[i % len(cores)]):
            pair.append(VLLMServer(ServeConfig(model=str(model), port=socket_port, api_key=key, omp_num_threads=1,
                                               log_file=str(tmp / f"pinned{i}.log"), **common)).start(wait=False))
    offline = None
    try:
        for s in (server, *pair):
            s.wait_healthy()
        print("(e) server CPU affinity: " + "; ".join(f"{s.base_url} -> cores {'/'.join(sorted(tree_cpus(s.proc.pid)))}"
                                                      for s in pair), flush=True)
        offline = VLLMOfflineEngine(OfflineConfig(model=str(model), served_model_name=server.model_name, **common))
        from vllm import SamplingParams

        endpoint = EndpointConfig(base_url=server.base_url, api_key=key, model=server.model_name,
                                  max_concurrency=64, timeout_s=600, max_retries=2)
        jcfg = JudgeConfig(n=args.n, max_tokens=args.max_tokens, run_seed=0)
        reqs = [GenerationRequest(as_messages(verification_prompt(t)), n=args.n, seed=base_seed(t.id, 0), key=t.id)
                for t in trajs]
        ids = [offline.prompt_ids(r) for r in reqs]
        fits = [len(i) + 64 < args.max_model_len for i in ids]  # (a) would fail a batch with a too-long prompt
        trajs = [t for t, f in zip(trajs, fits) if f]
        reqs = [r for r, f in zip(reqs, fits) if f]
        ids = [i for i, f in zip(ids, fits) if f]
        print(f"{len(trajs)} proofs fit the {args.max_model_len}-token context ({fits.count(False)} left out)", flush=True)
        print(f"prompt tokens: median {statistics.median(map(len, ids)):.0f}, max {max(map(len, ids))}", flush=True)
        params = [SamplingParams(n=args.n, seed=r.seed, temperature=1.0, top_p=1.0, max_tokens=args.max_tokens)
                  for r in reqs]

        def run_a() -> tuple[int, float]:
            t0 = time.perf_counter()
            res = offline.llm.generate([{"prompt_token_ids": i} for i in ids], params, use_tqdm=False)
            dt = time.perf_counter() - t0
            return sum(len(o.token_ids) for r in res for o in r.outputs), dt

        def run_b() -> tuple[int, float]:
            t0 = time.perf_counter()
            js = judge_trajectories(trajs, OpenAIEngine(endpoint), jcfg)
            dt = time.perf_counter() - t0
            assert all(j.complete and len(j.passes) == args.n for j in js)
            return sum(j.tokens for j in js), dt

        def run_c() -> tuple[int, float]:
            from openai import OpenAI

            client = OpenAI(base_url=server.base_url, api_key=key, max_retries=2)
            tokens, t0 = 0, time.perf_counter()
            for r in reqs[: args.naive_prompts]:
                for k in range(args.n):
                    resp = client.chat.completions.create(model=server.model_name, messages=r.messages, n=1,
                                                          seed=r.seed + k, temperature=1.0, top_p=1.0,
                                                          max_tokens=args.max_tokens)
                    tokens += resp.usage.completion_tokens
            return tokens, time.perf_counter() - t0

        d_set = trajs[: args.d_prompts]
        valid = [t for t in d_set if t.gold_verdict is not None and t.gold_verdict.value == "valid"]
        invalid = [t for t in d_set if t not in valid]
        groups = [(valid, args.accept_valid), (invalid, args.accept_invalid)]

        def guided(pct: int) -> OpenAIEngine:
            return OpenAIEngine(dataclasses.replace(
                endpoint, extra_body={"structured_outputs": {"regex": synthetic_verdict_regex(pct)}}))

        def run_d() -> dict:
            d = {"full_tokens": 0, "early_tokens": 0, "full_s": 0.0, "early_s": 0.0, "rates": {},
                 "same_decisions": True, "full_passes": 0, "early_passes": 0}
            cfg = dataclasses.replace(jcfg, max_tokens=64)
            for group, pct in groups:
                for mode in ("full", "early"):
                    t0 = time.perf_counter()
                    js = judge_trajectories(group, guided(pct), dataclasses.replace(cfg, early_stop=mode == "early"))
                    d[f"{mode}_s"] += time.perf_counter() - t0
                    d[f"{mode}_tokens"] += sum(j.tokens for j in js)
                    d[f"{mode}_passes"] += sum(len(j.passes) for j in js)
                    if mode == "full":
                        full = js
                        acc = sum(j.aggregate.n_accept for j in js) / max(1, sum(len(j.passes) for j in js))
                        d["rates"][f"set {pct}%"] = {
                            "pass_accept_rate": round(acc, 3),
                            "proof_accept_rate": round(sum(j.verdict.value == "valid" for j in js) / max(1, len(js)), 3),
                            "proofs": len(js)}
                    else:
                        d["same_decisions"] &= [j.verdict for j in js] == [j.verdict for j in full]
            return d

        e_set = trajs[: args.e_prompts]
        one_ep = dataclasses.replace(endpoint, base_url=pair[0].base_url)
        two_ep = dataclasses.replace(endpoint, base_url=[s.base_url for s in pair])

        def run_e() -> dict:
            e = {}
            for name, ep in (("one", one_ep), ("two", two_ep)):
                engine = OpenAIEngine(ep)
                t0 = time.perf_counter()
                js = judge_trajectories(e_set, engine, jcfg)
                dt = time.perf_counter() - t0
                assert all(j.complete and len(j.passes) == args.n for j in js)
                e[f"{name}_tok_s"] = sum(j.tokens for j in js) / dt
                e[f"{name}_s"] = dt
                e[f"{name}_per_server_requests"] = {u: v["requests"] for u, v in engine.stats["servers"].items()}
            e["two_servers_vs_one"] = e["two_tok_s"] / e["one_tok_s"]
            return e

        # warm-up (kernels, grammar compilation, connection pools)
        offline.llm.generate([{"prompt_token_ids": i} for i in ids[:16]], params[:16], use_tqdm=False)
        judge_trajectories(trajs[:16], OpenAIEngine(endpoint), jcfg)
        judge_trajectories(trajs[:16], OpenAIEngine(two_ep), jcfg)
        judge_trajectories(trajs[:4], guided(50), dataclasses.replace(jcfg, n=1, max_tokens=64))
        f_set = trajs[: args.peer_prompts]
        f_cfg = dataclasses.replace(jcfg, max_tokens=64)
        peer_python = Path(args.peer_python)
        peer_spec = {
            "base_url": server.base_url, "api_key": key, "model": server.model_name, "n": args.n,
            "temperature": f_cfg.temperature, "top_p": f_cfg.top_p, "max_tokens": f_cfg.max_tokens,
            "max_connections": endpoint.max_concurrency,
            "extra_body": {"structured_outputs": {"regex": synthetic_verdict_regex(args.peer_accept)}},
            "samples": [{"id": t.id, "messages": as_messages(verification_item(t, f_cfg).prompt),
                         "seed": base_seed(t.id, f_cfg.run_seed)} for t in f_set]}
        n_steps = {t.id: len(t.proof_steps) for t in f_set}

        def run_f(rep_i: int) -> dict:
            f: dict = {}

            def ours():
                t0 = time.perf_counter()
                js = judge_trajectories(f_set, guided(args.peer_accept), f_cfg)
                f["ours_s"] = time.perf_counter() - t0
                f["ours_complete"] = sum(j.complete for j in js)
                f["_ours"] = {j.id: j.verdict if j.complete else None for j in js}
                f["_ours_texts"] = {j.id: [c.text for c in j.completions] for j in js}

            def peer():
                res = run_peer(peer_python, peer_spec, tmp / "peer")
                f.update(peer_s=res["eval_s"], peer_import_s=res["import_s"], peer_process_s=res["process_s"],
                         inspect_ai=res.get("inspect_ai"))
                f["_peer_rows"] = res["completions"]

            for side in ((ours, peer) if rep_i % 2 == 0 else (peer, ours)):
                side()
            f["order"] = "ours,peer" if rep_i % 2 == 0 else "peer,ours"
            peer_dec = peer_decisions(f.pop("_peer_rows"), n_steps, args.n) if "_peer_rows" in f else {}
            f["peer_agreement"] = agreement(f["_ours"], peer_dec)
            f["ours_accepted"] = sum(v is Verdict.VALID for v in f["_ours"].values())
            f["peer_accepted"] = sum(v is Verdict.VALID for v in peer_dec.values())
            f["peer_decided"] = sum(v is not None for v in peer_dec.values())
            f["proofs"] = len(f_set)
            f["ours_proofs_s"] = len(f_set) / f["ours_s"]
            f["peer_proofs_s"] = len(f_set) / f["peer_s"]
            f["vs_peer"] = f["ours_proofs_s"] / f["peer_proofs_s"]
            # with each side's process start: ours = the judging call + a fresh interpreter importing our client
            f["ours_with_start_s"] = f["ours_s"] + ours_start_s
            f["vs_peer_with_start"] = f["peer_process_s"] / f["ours_with_start_s"]
            f["_texts"] = (f.pop("_ours_texts"), f.pop("_ours"))
            return f

        def ours_process_start() -> float:
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import verifier.runner, verifier.engine, openai"], check=True,
                           cwd=REPO)
            return time.perf_counter() - t0

        ours_start_s = ours_process_start()
        peer_ok = peer_python.exists()
        if not peer_ok:
            print(f"WARNING: {peer_python} not found (make peer-deps): (f) skipped, vs_peer=nan", flush=True)
        reps = []
        for r in range(args.repeats):
            (ta, sa), (tb, sb), (tc, sc) = run_a(), run_b(), run_c()
            d = run_d()
            e = run_e()
            f = run_f(r) if peer_ok else {"vs_peer": math.nan, "peer_agreement": math.nan}
            if peer_ok:
                texts, ours_dec = f.pop("_texts")
                rows = json.loads((tmp / "peer" / "peer_out.json").read_text())["completions"]
                f["pass_text_agreement"] = pass_text_agreement(texts, rows)
            rep = {"a_tok_s": ta / sa, "b_tok_s": tb / sb, "c_tok_s": tc / sc, "a_tokens": ta, "b_tokens": tb,
                   "c_tokens": tc, "a_s": sa, "b_s": sb, "c_s": sc, **{f"d_{k}": v for k, v in d.items()},
                   **{f"e_{k}": v for k, v in e.items()}, "two_servers_vs_one": e["two_servers_vs_one"],
                   **{f"f_{k}": v for k, v in f.items()}, "vs_peer": f["vs_peer"],
                   "peer_agreement": f["peer_agreement"]}
            rep["judge_vs_raw"] = rep["b_tok_s"] / rep["a_tok_s"]
            rep["judge_vs_naive"] = rep["b_tok_s"] / rep["c_tok_s"]
            rep["early_stop_token_saving"] = 1 - d["early_tokens"] / d["full_tokens"]
            reps.append(rep)
            print(f"repeat {r + 1}/{args.repeats}: (a) raw vllm.LLM {rep['a_tok_s']:.0f} tok/s ({sa:.1f}s)  "
                  f"(b) judge client {rep['b_tok_s']:.0f} tok/s ({sb:.1f}s)  (c) naive {rep['c_tok_s']:.0f} tok/s "
                  f"({sc:.1f}s)  (d) tokens full {d['full_tokens']} / early {d['early_tokens']} "
                  f"(passes {d['full_passes']} / {d['early_passes']}, same decisions: {d['same_decisions']})  "
                  f"(e) one pinned server {e['one_tok_s']:.0f} tok/s ({e['one_s']:.1f}s), two {e['two_tok_s']:.0f} "
                  f"tok/s ({e['two_s']:.1f}s, requests per server {list(e['two_per_server_requests'].values())})",
                  flush=True)
            if peer_ok:
                print(f"repeat {r + 1}/{args.repeats} (f) {f['proofs']} proofs x {args.n} passes, order {f['order']}: "
                      f"ours {f['ours_proofs_s']:.2f} proofs/s ({f['ours_s']:.1f}s), inspect-ai "
                      f"{f['inspect_ai']} {f['peer_proofs_s']:.2f} proofs/s (eval {f['peer_s']:.1f}s; whole "
                      f"process {f['peer_process_s']:.1f}s, import {f['peer_import_s']:.1f}s; ours with a fresh "
                      f"interpreter's imports {f['ours_with_start_s']:.1f}s): vs_peer {f['vs_peer']:.2f} "
                      f"(with process start {f['vs_peer_with_start']:.2f}); decisions agree on "
                      f"{f['peer_agreement']:.3f} (accepted: ours {f['ours_accepted']}, peer {f['peer_accepted']}; "
                      f"peer decided {f['peer_decided']}), identical pass texts {f['pass_text_agreement']:.3f}",
                      flush=True)
        med = {k: statistics.median(r[k] for r in reps)
               for k in ("a_tok_s", "b_tok_s", "c_tok_s", "e_one_tok_s", "e_two_tok_s", "judge_vs_raw", "judge_vs_naive",
                         "early_stop_token_saving", "two_servers_vs_one", "vs_peer", "peer_agreement")}
        rates = reps[-1]["d_rates"]
        print("(d) accept rates (set -> realised per pass; proofs accepted under 8-pass pessimism): "
              + "; ".join(f"{k} -> {v['pass_accept_rate']:.2f} per pass, {v['proof_accept_rate']:.2f} of "
                          f"{v['proofs']} proofs" for k, v in rates.items()), flush=True)
        print(f"medians over {len(reps)} repeats: raw {med['a_tok_s']:.0f} tok/s, judge {med['b_tok_s']:.0f} tok/s, "
              f"naive {med['c_tok_s']:.0f} tok/s (targets: judge_vs_raw >= 0.9, judge_vs_naive >= 4, saving >= 0.3); "
              f"(e) one pinned server {med['e_one_tok_s']:.0f} tok/s, two {med['e_two_tok_s']:.0f} tok/s "
              f"(ideal two_servers_vs_one = 2 with a free core per server; the client and the other benchmark "
              f"processes share these {len(cores)} cores)", flush=True)
        (out_dir / "results.json").write_text(json.dumps({"args": vars(args), "repeats": reps, "medians": med},
                                                         indent=2, default=str))
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            fig, ax = plt.subplots(figsize=(8, 3.5))
            names = ["(a) raw vllm.LLM", "(b) judge client", "(c) naive client", "(e) 1 pinned server",
                     "(e) 2 pinned servers"]
            vals = [med["a_tok_s"], med["b_tok_s"], med["c_tok_s"], med["e_one_tok_s"], med["e_two_tok_s"]]
            ax.bar(names, vals, color=["#777", "#1f77b4", "#d62728", "#2ca02c", "#98df8a"])
            ax.tick_params(axis="x", labelsize=7)
            ax.set_ylabel("completion tokens / s (median)")
            ax.set_title(f"n={args.n}, {len(trajs)} ProcessBench prompts; early-stop saving "
                         f"{med['early_stop_token_saving']:.2f}; two servers vs one {med['two_servers_vs_one']:.2f}",
                         fontsize=9)
            fig.tight_layout()
            fig.savefig(out_dir / "throughput.png", dpi=120)
            plt.close(fig)
        except Exception as e:  # noqa: BLE001 - the numbers matter more than the plot
            print(f"(plot skipped: {e})", flush=True)
        print(f"results: {out_dir / 'results.json'}, plot: {out_dir / 'throughput.png'}", flush=True)
    finally:
        if offline is not None:
            offline.close()
        for s in (server, *pair):
            s.stop()
    last_line(line_values(med, med["vs_peer"], med["peer_agreement"]), formats=LINE_FORMATS)


if __name__ == "__main__":
    run_command("bench-judge", main)
