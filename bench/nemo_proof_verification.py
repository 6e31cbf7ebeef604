"""NeMo Gym's ``proof_verification`` reward on given verifier outputs (run by ``bench/bench_nemo_reward.py``).

Runs under a Python >= 3.12 interpreter with ``nemo-gym`` installed (0.4.0: the project's Python 3.11 cannot
install it). ``python bench/nemo_proof_verification.py IN.json OUT.json``; ``IN.json``: ``base_url`` host and
``port`` of the judge (an OpenAI-compatible server started with api key ``EMPTY``, as NeMo Gym's external judge
client sends), ``model``, ``temperature``, ``top_p``, ``max_tokens``, ``rows``: ``[{"problem", "proof",
"ground_truth_judgement", "ground_truth_verify_score", "full_response"}]``. Every row goes through the server's
own ``_judge_single`` (its parsing, length guards and meta-verifier call through ``JUDGE_SERVER_ARGS``), all rows
in flight at once. ``OUT.json``: ``rewards`` (a float, or ``null`` where the call raised, with ``errors``),
``details``, ``wall_s`` of the gathered calls, each meta-verifier answer's last 300 characters and whether NeMo Gym's
``extract_boxed_score`` read a score from it (``meta_read``; an unread answer is ``r_meta = 0`` there).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time


def main(inp: str, out: str) -> None:
    cfg = json.loads(open(inp).read())
    os.environ["JUDGE_SERVER_ARGS"] = json.dumps({"server_type": "vllm", "model": cfg["model"], "port": cfg["port"]})
    os.environ["SLURM_MASTER_NODE_HET_GROUP_1"] = cfg["host"]
    from resources_servers.proof_verification.app import (
        ProofVerificationResourcesServer,
        ProofVerificationResourcesServerConfig,
        extract_boxed_score,
    )

    conf = ProofVerificationResourcesServerConfig.model_construct(
        temperature=cfg["temperature"], top_p=cfg["top_p"], max_tokens=cfg["max_tokens"], assert_think_end=False)
    server = ProofVerificationResourcesServer.model_construct(config=conf)

    async def one(row):
        try:
            return await server._judge_single(**row), None
        except Exception as e:  # noqa: BLE001 - a failed judge call: recorded as NeMo Gym would raise it
            return (None, {}), f"{type(e).__name__}: {e}"[:300]

    async def run():
        return await asyncio.gather(*(one(r) for r in cfg["rows"]))

    t0 = time.perf_counter()
    res = asyncio.run(run())
    wall = time.perf_counter() - t0
    json.dump({"wall_s": wall, "rewards": [r[0][0] for r in res], "errors": [r[1] for r in res],
               "details": [{k: v for k, v in (r[0][1] or {}).items() if k != "meta_response"} for r in res],
               "meta_responses": [(r[0][1] or {}).get("meta_response", "")[-300:] for r in res],
               "meta_read": [extract_boxed_score((r[0][1] or {}).get("meta_response", "")) is not None for r in res]},
              open(out, "w"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
