"""Held-out evaluation of a policy inside a training run (section 5.4, Table 3).

Generates ``n_passes`` verifications per held-out trajectory with the in-memory model
(Hugging Face ``generate``; the same chat template TRL uses), parses them with the one
parser, aggregates the passes (``pess_ver``: 8-pass pessimistic), grades the decision
with the meta-verifier, and scores it with ``eval.metrics.score_predictions`` (Rough and
Meta TPR / TNR / Balanced F1 with clustered bootstrap CIs). Also reports the held-out
mean GRPO reward (meta-verifier grade per pass, unparseable = 0) with its per-record
values, which ``bench/bench_learning.py`` compares before and after GRPO.

Writes ``predictions.jsonl`` (the ``eval.judge`` layout) and ``metrics.json`` under the run folder.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifier.aggregate import AggregationPolicy, aggregate
from verifier.meta_verifier import RuleMetaVerifier
from verifier.parser import parse_verification
from verifier.records import NO_STEP, MetaGrade, ParseStatus, ProofTrajectory, Verdict, VerificationOutput
from verifier.templates import as_messages, verification_prompt

log = logging.getLogger(__name__)


@dataclass
class EvalConfig:
    """Held-out evaluation of a run (``eval.*`` in ``configs/grpo.yaml``)."""

    enabled: bool = True
    n_passes: int = 1
    aggregation: str = "pessimistic"  # pessimistic | k_of_n | majority (pess_ver: pessimistic, n_passes=8)
    k: int | None = None
    max_new_tokens: int = 8192  # >= the completion budget (profile=cpu_tiny: 32)
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    batch_size: int = 16
    max_prompt_length: int | None = None
    meta_threshold: str = "BASIC_MATCH"
    bootstrap_n: int = 1000
    seed: int = 0


def generate_verifications(model, tokenizer, trajs: Sequence[ProofTrajectory], n: int = 1, max_new_tokens: int = 32,
                           temperature: float = 1.0, top_p: float = 1.0, batch_size: int = 16,
                           with_reference: bool = False, seed: int = 0, progress: bool = True,
                           max_prompt_length: int | None = None, template: str = "verify") -> list[list[str]]:
    """``n`` completions per trajectory from an in-memory causal LM (left-padded batches)."""
    import torch
    from tqdm.auto import tqdm

    prompts = [tokenizer.apply_chat_template(as_messages(verification_prompt(t, with_reference=with_reference, template=template)),
                                             tokenize=False, add_generation_prompt=True) for t in trajs]
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    torch.manual_seed(seed)
    items = [(i, p) for i, p in enumerate(prompts) for _ in range(n)]
    texts: list[list[str]] = [[] for _ in trajs]
    device = next(model.parameters()).device
    bar = tqdm(total=len(items), desc="held-out generation", unit="pass", disable=not progress)
    for start in range(0, len(items), batch_size):
        chunk = items[start: start + batch_size]
        enc = tokenizer([p for _, p in chunk], return_tensors="pt", padding=True, add_special_tokens=False,
                        truncation=max_prompt_length is not None, max_length=max_prompt_length)
        enc = {k: v.to(device) for k, v in enc.items()}
        kw: dict[str, Any] = dict(max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                  eos_token_id=tokenizer.eos_token_id)
        if temperature > 0:
            kw.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
        else:
            kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with torch.no_grad():
            out = model.generate(**enc, **kw)
        new = out[:, enc["input_ids"].shape[1]:]
        for (i, _), ids in zip(chunk, new):
            texts[i].append(tokenizer.decode(ids, skip_special_tokens=True))
        bar.update(len(chunk))
    bar.close()
    return texts


def _policy(cfg: EvalConfig) -> AggregationPolicy:
    return AggregationPolicy(kind=cfg.aggregation, n=cfg.n_passes, k=cfg.k)  # type: ignore[arg-type]


def decide(passes: Sequence[VerificationOutput], policy: AggregationPolicy) -> VerificationOutput:
    """The aggregated decision as one output; its rationale is that of the first pass agreeing with it."""
    agg = aggregate(list(passes), policy)
    rep = next((p for p in passes if p.ok and p.verdict is agg.verdict
                and (agg.verdict is Verdict.VALID or p.first_error_step == agg.first_error_step)), None)
    rep = rep or next((p for p in passes if p.ok and p.verdict is agg.verdict), None)
    if rep is None:  # nothing parsed: an unparseable decision (counts as a rejection)
        return VerificationOutput(ParseStatus.NO_ANSWER_BLOCK, None, NO_STEP, "", "", "no pass parsed")
    return VerificationOutput(ParseStatus.OK, agg.verdict, agg.first_error_step, rep.rationale, rep.raw_text)


def score_texts(trajs: Sequence[ProofTrajectory], texts: Sequence[Sequence[str]], cfg: EvalConfig,
                meta_verifier: Any = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Metrics and prediction rows for the generated texts of each trajectory."""
    from eval.metrics import Prediction, ScoreOptions, score_predictions
    from eval.stats import BootstrapSpec

    mv = meta_verifier or RuleMetaVerifier()
    policy = _policy(cfg)
    rows: list[dict[str, Any]] = []
    preds: dict[str, Prediction] = {}
    pass_rewards: list[float] = []
    per_record_reward: list[float] = []
    unparsed = 0
    for t, ts in zip(trajs, texts, strict=True):
        passes = [parse_verification(x, len(t.proof_steps)) for x in ts]
        unparsed += sum(not p.ok for p in passes)
        graded = mv.grade_batch([(t, p) for p in passes if p.ok])
        it = iter(graded)
        rew = [next(it).reward if p.ok else 0.0 for p in passes]
        rew = [0.0 if r is None else r for r in rew]
        pass_rewards += rew
        per_record_reward.append(sum(rew) / len(rew))
        dec = decide(passes, policy)
        grade = mv.grade_batch([(t, dec)])[0].grade if dec.ok else MetaGrade.WRONG_POLARITY
        row = {"id": t.id, "problem_id": t.problem_id,
               "verdict": dec.verdict.value if dec.verdict else None, "first_error_step": dec.first_error_step,
               "meta_grade": grade.value if grade else None, "mean_reward": per_record_reward[-1],
               "passes": [{"index": i, **p.to_dict()} for i, p in enumerate(passes)]}
        rows.append(row)
        preds[t.id] = Prediction.from_dict(row)
    opts = ScoreOptions(meta_threshold=MetaGrade.parse(cfg.meta_threshold),
                        bootstrap=BootstrapSpec(n=cfg.bootstrap_n, seed=cfg.seed), k_curve=cfg.n_passes > 1)
    from eval.score import flatten

    scored = flatten(score_predictions(list(trajs), preds, opts))  # the eval.score metrics.json layout
    if cfg.n_passes > 1:  # every sampled pass as its own verdict (single-pass TPR/TNR/BF1)
        pp_gold, pp_preds = [], {}
        for t, row in zip(trajs, rows):
            for p in row["passes"]:
                key = f"{t.id}#{p['index']}"
                pp_gold.append(dataclasses.replace(t, id=key))
                out = VerificationOutput(ParseStatus(p["parse_status"]), Verdict(p["verdict"]) if p["verdict"] else None,
                                         p["first_error_step"], p["rationale"])
                g = mv.grade_batch([(t, out)])[0].grade if out.ok else MetaGrade.WRONG_POLARITY
                pp_preds[key] = Prediction(key, out.verdict if out.ok else None, out.first_error_step, g,
                                           has_meta=True)
        per_pass = score_predictions(pp_gold, pp_preds, dataclasses.replace(opts, breakdowns=(), k_curve=False))
        scored["per_pass"] = flatten(per_pass)
    scored["mean_reward"] = sum(pass_rewards) / max(1, len(pass_rewards))
    scored["parse_failure_rate"] = unparsed / max(1, len(pass_rewards))
    scored["per_record_reward"] = per_record_reward
    scored["eval_config"] = {"n_passes": cfg.n_passes, "aggregation": cfg.aggregation, "k": cfg.k,
                             "temperature": cfg.temperature, "max_new_tokens": cfg.max_new_tokens}
    return scored, rows


def evaluate_model(model, tokenizer, trajs: Sequence[ProofTrajectory], cfg: EvalConfig, with_reference: bool = False,
                   out_dir: str | Path | None = None, label: str = "", meta_verifier: Any = None,
                   template: str = "verify") -> dict[str, Any]:
    """Generate, parse, aggregate, grade and score the held-out set; write predictions.jsonl if ``out_dir``."""
    texts = generate_verifications(model, tokenizer, trajs, cfg.n_passes, cfg.max_new_tokens, cfg.temperature,
                                   cfg.top_p, cfg.batch_size, with_reference, cfg.seed,
                                   max_prompt_length=cfg.max_prompt_length, template=template)
    scored, rows = score_texts(trajs, texts, cfg, meta_verifier)
    scored["label"] = label
    if out_dir is not None:
        from verifier.io import write_jsonl

        write_jsonl(Path(out_dir) / "predictions.jsonl", rows)
    log.info("%s held-out: mean reward %.3f, rough BF1 %s, meta BF1 %s, parse failures %.1f%%", label,
             scored["mean_reward"], scored["rough.balanced_f1"]["value"], scored["meta.balanced_f1"]["value"],
             100 * scored["parse_failure_rate"])
    return scored


def write_metrics(out_dir: str | Path, metrics: dict[str, Any]) -> Path:
    """``DIR/metrics.json`` in the layout of ``eval.score`` (top-level rough.* / meta.* entries), which
    ``python -m eval.report runs=[...]`` tabulates."""
    from eval.score import write_metrics as _write

    return _write(out_dir, json.loads(json.dumps(metrics, default=str)))
