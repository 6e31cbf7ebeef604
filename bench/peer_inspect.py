"""The peer side of ``make bench-judge``'s peer comparison: 8-pass judging through inspect-ai.

Runs under ``.venv-peer/bin/python`` (``make peer-deps``: inspect-ai and openai in their own virtualenv, never in
``.venv``). ``python bench/peer_inspect.py IN.json OUT.json``. ``IN.json`` holds ``base_url``, ``api_key``,
``model`` (the served name), ``n`` (passes = inspect epochs), ``temperature``, ``top_p``, ``max_tokens``,
``max_connections``, ``extra_body`` and ``samples``: ``[{"id", "messages", "seed"}]``. One inspect ``eval``
runs the task with the OpenAI-compatible provider (``openai-api/local/<model>`` with ``base_url``) on the local
server only: epoch ``e`` (1-based) of a sample is drawn with ``seed + e - 1``, the seed of our client's pass
``e - 1`` (vLLM draws sample ``i`` of an ``n``-sample request with ``seed + i``). The scorer records each epoch's
completion; the decision rule (our parser, 8-pass pessimism) is applied on our side, so both sides decide alike.

``OUT.json``: ``import_s`` (interpreter start to inspect-ai imported), ``eval_s`` (the ``eval`` call: task setup,
all requests, scoring, the log), ``completions``: ``[{"id", "epoch", "text", "finish_reason", "error"}]``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time

T_START = time.perf_counter()


def main(inp: str, out: str) -> None:
    from inspect_ai import Epochs, Task, eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.model import ChatMessageSystem, ChatMessageUser, GenerateConfig, get_model
    from inspect_ai.scorer import Score, Target, mean, scorer
    from inspect_ai.solver import Generate, TaskState, solver

    import_s = time.perf_counter() - T_START
    cfg = json.loads(open(inp).read())

    def message(m: dict):
        return (ChatMessageSystem if m["role"] == "system" else ChatMessageUser)(content=m["content"])

    dataset = MemoryDataset([Sample(id=s["id"], input=[message(m) for m in s["messages"]],
                                    metadata={"seed": int(s["seed"])}) for s in cfg["samples"]])

    @solver
    def seeded_generate():
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            # one pass per epoch, with the seed of the same pass on our side
            return await generate(state, seed=state.metadata["seed"] + state.epoch - 1)

        return solve

    @scorer(metrics=[mean()])
    def record_completion():
        async def score(state: TaskState, target: Target) -> Score:
            choice = state.output.choices[0] if state.output.choices else None
            return Score(value=0, answer=state.output.completion,
                         metadata={"finish_reason": getattr(choice, "stop_reason", None),
                                   "error": state.output.error})

        return score

    model = get_model(f"openai-api/local/{cfg['model']}", base_url=cfg["base_url"], api_key=cfg["api_key"],
                      config=GenerateConfig(temperature=cfg["temperature"], top_p=cfg["top_p"],
                                            max_tokens=cfg["max_tokens"], extra_body=cfg.get("extra_body") or None,
                                            max_connections=cfg["max_connections"], max_retries=2,
                                            timeout=600))
    task = Task(dataset=dataset, solver=seeded_generate(), scorer=record_completion(),
                epochs=Epochs(cfg["n"]))
    with tempfile.TemporaryDirectory(prefix="peer_inspect_") as log_dir:
        t0 = time.perf_counter()
        logs = eval(task, model=model, log_dir=log_dir, display="none", max_connections=cfg["max_connections"],
                    max_samples=cfg["max_connections"], fail_on_error=False, log_level="warning")
        eval_s = time.perf_counter() - t0
        log = logs[0]  # its samples are read from the log file: inside the log dir's lifetime
        if log.status != "success":
            raise SystemExit(f"inspect eval {log.status}: {log.error}")
        rows = []
        for s in log.samples or []:
            score = next(iter((s.scores or {}).values()), None)
            meta = (score.metadata or {}) if score is not None else {}
            rows.append({"id": s.id, "epoch": s.epoch, "text": s.output.completion,
                         "finish_reason": meta.get("finish_reason"), "error": meta.get("error")})
    open(out, "w").write(json.dumps({"import_s": import_s, "eval_s": eval_s, "completions": rows,
                                     "inspect_ai": __import__("inspect_ai").__version__}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
