"""The verifier card (verifier/card.py): written by the training recipes, read by the judging commands."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from verifier.card import CARD_FILE, CardError, example_card, read_card, write_card
from verifier.config import compose

REPO = Path(__file__).resolve().parents[1]


def _commands():
    from eval.judge import JudgeAppConfig
    from eval.proverbench import ProverBenchConfig
    from eval.verifierbench import VerifierBenchConfig

    return {  # command -> (schema, required overrides, endpoint key)
        "judge": (JudgeAppConfig, ["input=x.jsonl", "output=y.jsonl"], "endpoint"),
        "verifierbench": (VerifierBenchConfig, ["data=x.jsonl", "out=y"], "verifier"),
        "proverbench": (ProverBenchConfig, ["problems=x.jsonl", "out=y"], "verifier"),
    }


def _compose(name: str, run_dir: Path | None, *extra: str):
    schema, required, _ = _commands()[name]
    return compose(name, schema, [*required, *([f"verifier_run_dir={run_dir}"] if run_dir else []), *extra])


@pytest.fixture()
def run_dir(tmp_path) -> Path:
    """A run directory whose card differs from every command's defaults."""
    write_card(tmp_path / "run", example_card(template="verify_compact", with_reference=False, train_max_tokens=4096,
                                              needed_max_tokens=700, judge_max_tokens=6000, temperature=0.7,
                                              top_p=0.95, chat_template_kwargs={"enable_thinking": False}))
    return tmp_path / "run"


# ------------------------------------------------------------------------ written by a training run


def test_sft_run_writes_the_verifier_card(tmp_path, tiny_model):
    from transformers import AutoTokenizer

    from data_pipeline.synthetic import generate_synthetic
    from training.sft import SFTRunConfig, gold_text, sft_train

    out = tmp_path / "sft"
    cfg = compose("sft", SFTRunConfig, [f"output_dir={out}", f"model.name_or_path={tiny_model}", "max_steps=1",
                                        "per_device_train_batch_size=2", "style=minimal", "logging_steps=1",
                                        "data.prompt_template=verify_compact", "data.with_reference=true"])
    train = generate_synthetic(4, seed=1, min_steps=3, max_steps=3, max_operand=9)
    sft_train(cfg, train)
    card = read_card(out)
    tok = AutoTokenizer.from_pretrained(tiny_model)
    longest = max(len(tok(gold_text(t, "minimal"), add_special_tokens=False)["input_ids"]) for t in train) + 1
    assert card == dataclasses.replace(card, recipe="sft", base_model=str(tiny_model), template="verify_compact",
                                       with_reference=True, train_max_tokens=longest, needed_max_tokens=longest,
                                       judge_max_tokens=None, served_model_name="verifier", schema_version=1)


def test_grpo_run_writes_the_verifier_card(tmp_path, tiny_model, capsys):
    from eval.verifierbench import VerifierBenchConfig
    from training.config import GRPORunConfig
    from training.grpo import needed_tokens, run

    out = tmp_path / "grpo"
    cfg = compose("grpo", GRPORunConfig, ["experiment=meta_ver_rl", f"output_dir={out}", f"model.name_or_path={tiny_model}",
                                          "grpo.max_steps=1", "grpo.save_steps=1", "grpo.per_device_train_batch_size=4",
                                          "grpo.num_generations=4", "grpo.max_completion_length=8", "data.n_train=4",
                                          "data.prompt_template=verify_compact", "eval.enabled=false",
                                          "eval.judge.max_tokens=24", "eval.judge.temperature=0.9",
                                          "grpo.chat_template_kwargs={enable_thinking: false}", "wandb.enabled=false"])
    run(cfg)
    card = read_card(out)
    log = json.loads((out / "train_log.json").read_text())
    assert 1 <= card.needed_max_tokens == needed_tokens(log, 8) <= 8
    assert card == dataclasses.replace(card, recipe="grpo", base_model=str(tiny_model), template="verify_compact",
                                       with_reference=False, train_max_tokens=8, judge_max_tokens=24,
                                       temperature=0.9, top_p=1.0, thinking=False,
                                       chat_template_kwargs={"enable_thinking": False}, served_model_name="verifier",
                                       schema_version=1)
    # the card travels with the weights: VerifierBench on the run's checkpoint takes the run's prompt and budget
    bench = compose("verifierbench", VerifierBenchConfig, ["data=x.jsonl", "out=y", f"verifier_run_dir={out}",
                                                           "engine=offline"])
    assert (bench.offline.model, bench.judge.template, bench.judge.max_tokens) == (str(out / "final"), "verify_compact", 24)


# ------------------------------------------------------------------------ read by the judging commands


@pytest.mark.parametrize("name", ["judge", "verifierbench", "proverbench"])
def test_unset_judge_keys_come_from_the_card(name, run_dir, capsys):
    ep = _commands()[name][2]
    plain = _compose(name, None, "judge.n=2")
    cfg = _compose(name, run_dir, "judge.n=2")
    assert (plain.judge.template, plain.judge.temperature) == ("verify", 1.0)  # the command's own defaults
    j, e = cfg.judge, getattr(cfg, ep)
    assert (j.template, j.with_reference, j.max_tokens, j.temperature, j.top_p) == ("verify_compact", False, 6000, 0.7, 0.95)
    assert (e.model, e.chat_template_kwargs) == ("verifier", {"enable_thinking": False})
    assert j.n == 2  # a key the card does not hold stays the command line's
    err = capsys.readouterr().err
    assert "warning" not in err
    assert f"note: {run_dir / CARD_FILE} sets judge.template=verify_compact judge.with_reference=false" in err


@pytest.mark.parametrize("name", ["judge", "verifierbench", "proverbench"])
def test_a_key_that_contradicts_the_card_is_a_warning_naming_both_values(name, run_dir, capsys):
    cfg = _compose(name, run_dir, "judge.max_tokens=1024", "judge.with_reference=true", "judge.top_p=0.95")
    assert (cfg.judge.max_tokens, cfg.judge.with_reference) == (1024, True)  # the user's values are kept
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning")]
    assert warnings == [  # judge.top_p agrees with the card: no warning
        f"warning: judge.max_tokens=1024 but the verifier was trained with 4096 ({run_dir / CARD_FILE})",
        f"warning: judge.with_reference=true but the verifier was trained with false ({run_dir / CARD_FILE})"]
    _compose(name, run_dir, "judge.max_tokens=8192")
    assert [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning")] == [
        f"warning: judge.max_tokens=8192 but the verifier's held-out judge used 6000 ({run_dir / CARD_FILE})"]


@pytest.mark.parametrize("override,message", [
    ("judge.template=verify", "judge.template=verify but the verifier was trained with verify_compact"),
    ("judge.max_tokens=512", "judge.max_tokens=512 is below the 700 tokens the verifier needs"),
    ("verifier.max_tokens=512", "verifier.max_tokens=512 is below the 700 tokens the verifier needs"),
])
def test_another_template_or_a_budget_below_the_need_is_an_error(override, message, run_dir):
    with pytest.raises(CardError, match=re.escape(message)):
        _compose("verifierbench", run_dir, override)


def test_the_error_ends_the_command_with_one_line_and_exit_code_2(run_dir, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    out = tmp_path / "judged.jsonl"
    p = subprocess.run([sys.executable, "-m", "eval.judge", f"input={tmp_path / 'proofs.jsonl'}", f"output={out}",
                        f"verifier_run_dir={run_dir}", "judge.template=verify"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines() == [
        f"eval.judge: error: judge.template=verify but the verifier was trained with verify_compact "
        f"({run_dir / CARD_FILE}): its numbers under another prompt are not this verifier's; leave judge.template out"]
    assert not out.exists()


def test_a_card_that_cannot_be_read_is_one_error_naming_the_file_and_field(tmp_path, run_dir):
    assert read_card(run_dir) == dataclasses.replace(example_card(), template="verify_compact", judge_max_tokens=6000,
                                                     temperature=0.7, top_p=0.95,
                                                     chat_template_kwargs={"enable_thinking": False})
    with pytest.raises(CardError, match=re.escape(f"verifier_run_dir={tmp_path}: no {CARD_FILE} there")):
        _compose("judge", tmp_path)
    doc = json.loads((run_dir / CARD_FILE).read_text())
    for bad, message in [({"template": None}, "field 'template': expected str, got None"),
                         ({"with_reference": "no"}, "field 'with_reference': expected bool, got 'no'"),
                         ({"schema_version": 2}, "field 'schema_version': version 2 is newer"),
                         ({"needed_max_tokens": 0}, "field 'needed_max_tokens': must be >= 1")]:
        (run_dir / CARD_FILE).write_text(json.dumps({**doc, **bad}))
        with pytest.raises(CardError, match=message):
            read_card(run_dir)
    (run_dir / CARD_FILE).write_text(json.dumps({k: v for k, v in doc.items() if k != "train_max_tokens"}))
    with pytest.raises(CardError, match=re.escape(f"{run_dir / CARD_FILE}, field 'train_max_tokens': missing")):
        read_card(run_dir)


# ------------------------------------------------------------------------ read by experiment=prover_rl's reward judge


def _prover(run_dir: Path | None, *extra: str):
    from training.config import GRPORunConfig

    return compose("grpo", GRPORunConfig, ["experiment=prover_rl",
                                           *([f"prover.verifier_run_dir={run_dir}"] if run_dir else []), *extra])


def test_prover_rl_reward_judge_inherits_the_card(run_dir, capsys):
    plain = _prover(None, "prover.judge.n=2")
    assert (plain.prover.judge.template, plain.prover.verifier.chat_template_kwargs) == ("verify", None)  # own defaults
    p = _prover(run_dir, "prover.judge.n=2").prover
    j, e = p.judge, p.verifier
    assert (j.template, j.with_reference, j.max_tokens, j.temperature, j.top_p) == ("verify_compact", False, 6000, 0.7, 0.95)
    assert (e.model, e.chat_template_kwargs) == ("verifier", {"enable_thinking": False})
    assert j.n == 2 and p.template == "generate_proof"  # the prover's own prompt is not the card's
    err = capsys.readouterr().err
    assert "warning" not in err
    assert (f"note: {run_dir / CARD_FILE} sets prover.judge.template=verify_compact prover.judge.with_reference=false "
            f"prover.judge.max_tokens=6000") in err


def test_prover_rl_contradicting_key_is_a_warning_or_an_error_naming_the_prover_key(run_dir, tmp_path, capsys):
    p = _prover(run_dir, "prover.judge.max_tokens=1024", "prover.judge.with_reference=true").prover
    assert (p.judge.max_tokens, p.judge.with_reference) == (1024, True)
    assert [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning")] == [
        f"warning: prover.judge.max_tokens=1024 but the verifier was trained with 4096 ({run_dir / CARD_FILE})",
        f"warning: prover.judge.with_reference=true but the verifier was trained with false ({run_dir / CARD_FILE})"]
    for override, message in [
            ("prover.judge.template=verify", "prover.judge.template=verify but the verifier was trained with verify_compact"),
            ("prover.judge.max_tokens=512", "prover.judge.max_tokens=512 is below the 700 tokens the verifier needs"),
            ("prover.verifier.max_tokens=512", "prover.verifier.max_tokens=512 is below the 700 tokens")]:
        with pytest.raises(CardError, match=re.escape(message)):
            _prover(run_dir, override)
    with pytest.raises(CardError, match=re.escape(f"prover.verifier_run_dir={tmp_path}: no {CARD_FILE} there")):
        _prover(tmp_path)
    from training.config import GRPORunConfig

    with pytest.raises(CardError, match="trains no prover"):
        compose("grpo", GRPORunConfig, ["experiment=meta_ver_rl", f"prover.verifier_run_dir={run_dir}"])
