"""`make demo`: the main job on the embedded default (tiny model, bundled data).

Stages so far: build the tiny model; serve it with vLLM; judge ProcessBench gsm8k
proofs with 8 passes each; write the judgments. The last line printed is the path
of what it wrote.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("OMP_NUM_THREADS", "1")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    from data_pipeline.importers import SHARED_DATA, load_processbench
    from verifier.engine import EndpointConfig, GenerationRequest, OpenAIEngine, SamplingConfig, base_seed
    from verifier.parser import parse_verification
    from verifier.serve import ServeConfig, VLLMServer
    from verifier.templates import as_messages, verification_prompt
    from verifier.tiny_model import TinyModelConfig, build

    out = REPO / "runs" / "demo"
    out.mkdir(parents=True, exist_ok=True)
    print("[1/3] building the tiny model", flush=True)
    model = build(TinyModelConfig(out=str(REPO / "artifacts" / "tiny-model")))
    print(f"      wrote {model}")
    print("[2/3] serving it with vLLM", flush=True)
    server = VLLMServer(ServeConfig(model=str(model), port=_free_port(), api_key="demo-key",
                                    log_file=str(out / "vllm.log"), omp_num_threads=1)).start()
    try:
        print("[3/3] judging ProcessBench gsm8k proofs (8 passes each)", flush=True)
        trajs = load_processbench(SHARED_DATA / "processbench" / "gsm8k.json")[:16]
        engine = OpenAIEngine(EndpointConfig(base_url=server.base_url, api_key="demo-key", model=server.model_name))
        reqs = [GenerationRequest(as_messages(verification_prompt(t)), n=8, seed=base_seed(t.id), key=t.id)
                for t in trajs]
        results = engine.generate(reqs, SamplingConfig(max_tokens=64), progress=True)
        path = out / "judgments.jsonl"
        with open(path, "w") as f:
            for t, samples in zip(trajs, results):
                passes = [parse_verification(s.text, len(t.proof_steps)) for s in samples]
                f.write(json.dumps({"id": t.id, "passes": [{"index": i, **p.to_dict()} for i, p in enumerate(passes)]}) + "\n")
        print(f"      wrote {path}")
    finally:
        server.stop()
    print(path)


if __name__ == "__main__":
    main()
