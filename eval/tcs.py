"""TCS-Bench judging and routing (TCS-Bench seed: "Automated Proof Verification", "Colosseum Results").

``python -m eval.tcs input=PATH out=DIR endpoint.base_url=URL endpoint.model=NAME``

* Vote verifier: 4 calls of ``tcs_verify.j2`` (sees the ground-truth proof); a proof is
  correct if at least 3 of 4 votes accept - ``AggregationPolicy("k_of_n", n=4, k=3)``,
  i.e. ``verifier.aggregation()`` (the judge config's ``n``, ``policy``, ``k``, ``unparseable``; the old
  ``verifier_policy.*`` keys are :data:`RENAMED`). It labels proofs that have no human label.
* Two generators A and B (``generator_a`` / ``generator_b``: a model or LoRA adapter each)
  write proofs (``tcs_prove.j2``) unless the record already has ``proof_a`` / ``proof_b``.
* Self-rejection routing: A's own verifier (``self_verifier``, model A, ``tcs_critique.j2``,
  no ground truth) rejects A's proof -> submit B's.
* Cross-model critique routing: ``m`` critiques by B of A's proof; submit B's proof when A's
  verifier rejects, or when at most ``t`` of the ``m`` critiques accept A's proof.
* AUC of critique scores (accepting fraction) against gold labels, both directions
  (B judging A, and A judging B); oracle best-of-two; a threshold sweep t = 0..m.

Input JSONL: ``id``, ``context``, ``statement``, ``reference_proof``, optional ``proof_a``,
``proof_b``, ``label_a``, ``label_b`` (human correctness labels, booleans).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from eval.judges.core import Judge
from eval.stats import auc_mann_whitney
from verifier.aggregate import aggregate
from verifier.config import EndpointConfig, hydra_main
from verifier.io import load_rows, write_jsonl
from verifier.judging import JudgeConfig
from verifier.records import RecordError
from verifier.results import figure, md_table, pct, save_figure, write_markdown, write_metrics

# the vote verifier's and A's own verifier's aggregation live in their judge configs (n, policy, k, unparseable)
RENAMED: dict[str, str] = {
    **{f"{old}.{f}": f"{new}.{f}" for old, new in (("verifier_policy", "verifier"), ("self_policy", "self_verifier"))
       for f in ("n", "k", "unparseable")},
    "verifier_policy.kind": "verifier.policy", "self_policy.kind": "self_verifier.policy"}


@dataclass
class TCSConfig:
    """Hydra schema of ``configs/tcs.yaml``."""

    RENAMED: ClassVar[dict[str, str]] = RENAMED  # old keys keep working (verifier.config.renamed)

    input: str = "tests/data/tcs_illustrative.jsonl"
    out: str = "runs/tcs"
    on_error: str = "raise"  # raise | skip
    endpoint: EndpointConfig = field(default_factory=EndpointConfig)
    generator_a: JudgeConfig = field(default_factory=lambda: JudgeConfig(template="tcs_prove", parser="none",
                                                                         n=1, max_tokens=8192))
    generator_b: JudgeConfig = field(default_factory=lambda: JudgeConfig(template="tcs_prove", parser="none",
                                                                         n=1, max_tokens=8192))
    name_a: str = "A"
    name_b: str = "B"
    verifier: JudgeConfig = field(default_factory=lambda: JudgeConfig(template="tcs_verify", parser="critique", n=4,
                                                                      policy="k_of_n", k=3))
    use_human_labels: bool = True  # gold = label_a/label_b when present, else the vote verifier
    self_verifier: JudgeConfig = field(default_factory=lambda: JudgeConfig(template="tcs_critique", parser="critique",
                                                                           n=1))  # pessimistic
    critic: JudgeConfig = field(default_factory=lambda: JudgeConfig(template="tcs_critique", parser="critique", n=8))
    threshold: int = 4  # submit B when at most t of m critiques accept A's proof
    reverse_critique: bool = True  # also A critiquing B (AUC in the other direction)
    progress: bool = True


REQUIRED = ("context", "statement", "reference_proof")
JUDGMENTS = "tcs_judgments.jsonl"  # its rows in out, named for the judge (not judgments.jsonl)


def _check(d: dict[str, Any], rid: str, i: int) -> None:
    for f in ("label_a", "label_b"):
        if d.get(f) is not None and not isinstance(d[f], bool):
            raise RecordError(rid, f, f"{d[f]!r} is not a boolean", i)
    for f in ("proof_a", "proof_b"):
        if d.get(f) is not None and not isinstance(d[f], str):
            raise RecordError(rid, f, "not a string", i)


def load_records(path: str | Path, on_error: str = "raise") -> tuple[list[dict[str, Any]], list[RecordError]]:
    """TCS-Bench-shaped JSONL (``verifier.io.load_rows``); errors name the record id and field."""
    return load_rows(path, REQUIRED, on_error, _check)


def route(self_accepts: bool, critique_accepts: int, threshold: int | None) -> str:
    """Which proof to submit: ``b`` when A's verifier rejects A's proof or at most t critiques accept it.

    ``threshold=None`` routes on self-rejection alone.

    >>> route(False, 8, 4), route(True, 4, 4), route(True, 5, 4), route(True, 0, None)
    ('b', 'b', 'a', 'a')
    """
    if not self_accepts:
        return "b"
    if threshold is not None and critique_accepts <= threshold:
        return "b"
    return "a"


def routing_table(rows: list[dict[str, Any]], threshold: int, m: int) -> dict[str, Any]:
    """Accuracy of A, B, self-rejection routing, cross-model routing and oracle best-of-two, with counts.

    >>> rows = [dict(gold_a=True, gold_b=False, self_a=True, crit_a=6), dict(gold_a=False, gold_b=True, self_a=False, crit_a=7),
    ...         dict(gold_a=False, gold_b=True, self_a=True, crit_a=1), dict(gold_a=False, gold_b=False, self_a=True, crit_a=8)]
    >>> t = routing_table(rows, 4, 8); [t[k]["solved"] for k in ("a", "b", "self_rejection", "cross_model", "oracle")]
    [1, 2, 2, 3, 3]
    """
    n = len(rows)

    def acc(solved: int) -> dict[str, Any]:
        return {"solved": solved, "n": n, "accuracy": solved / n if n else None}

    def routed(t: int | None) -> tuple[int, dict[str, Any]]:
        solved, picks = 0, Counter()
        ok_by = Counter()
        for r in rows:
            pick = route(r["self_a"], r["crit_a"], t)
            picks[pick] += 1
            good = r[f"gold_{pick}"]
            solved += good
            ok_by[pick] += good
        return solved, {"picked_a": picks["a"], "picked_b": picks["b"],
                        "acc_when_a": ok_by["a"] / picks["a"] if picks["a"] else None,
                        "acc_when_b": ok_by["b"] / picks["b"] if picks["b"] else None}

    s_self, d_self = routed(None)
    s_cross, d_cross = routed(threshold)
    overturned = [r for r in rows if r["self_a"] and r["crit_a"] <= threshold]
    return {
        "a": acc(sum(r["gold_a"] for r in rows)),
        "b": acc(sum(r["gold_b"] for r in rows)),
        "self_rejection": acc(s_self) | d_self,
        "cross_model": acc(s_cross) | d_cross | {
            "threshold": threshold, "m": m, "overturned": len(overturned),
            "overturned_b_correct": sum(r["gold_b"] for r in overturned),
            "overturned_a_correct": sum(r["gold_a"] for r in overturned)},
        "oracle": acc(sum(r["gold_a"] or r["gold_b"] for r in rows)),
        "sweep": {t: routed(t)[0] / n if n else None for t in range(m + 1)},
    }


def _fields(rec: dict[str, Any], proof: str) -> dict[str, Any]:
    return {"context": rec["context"], "statement": rec["statement"], "reference_proof": rec["reference_proof"],
            "proof": proof}


def run(cfg: TCSConfig) -> dict[str, Any]:
    """Generate (if needed), vote-verify, self-verify, cross-critique, route, score and report."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    recs, errors = load_records(cfg.input, cfg.on_error)
    p = cfg.progress
    n_generated = {}
    for side, gen in (("a", cfg.generator_a), ("b", cfg.generator_b)):
        todo = [r for r in recs if r.get(f"proof_{side}") is None]
        n_generated[side] = len(todo)
        if todo:
            calls = Judge(cfg.endpoint, gen).run([(r["id"], r) for r in todo], progress=p)
            for r, cs in zip(todo, calls, strict=True):
                r[f"proof_{side}"] = cs[0].text
                r[f"proof_{side}_status"] = cs[0].completion_status
    model_a, model_b = cfg.generator_a.model, cfg.generator_b.model
    verifier = Judge(cfg.endpoint, cfg.verifier)
    vpol = cfg.verifier.aggregation()
    votes = {s: verifier.run([(f"{r['id']}:{s}", _fields(r, r[f"proof_{s}"])) for r in recs], progress=p)
             for s in ("a", "b")}
    # A's own verifier on A's proof (model A); B's critiques of A (model B) and, reversed, A's of B
    selfj = Judge(cfg.endpoint, _with_model(cfg.self_verifier, model_a))
    self_calls = selfj.run([(f"{r['id']}:self_a", _fields(r, r["proof_a"])) for r in recs], progress=p)
    critic_b = Judge(cfg.endpoint, _with_model(cfg.critic, model_b))
    crit_a = critic_b.run([(f"{r['id']}:b_on_a", _fields(r, r["proof_a"])) for r in recs], progress=p)
    crit_b = None
    if cfg.reverse_critique:
        critic_a = Judge(cfg.endpoint, _with_model(cfg.critic, model_a))
        crit_b = critic_a.run([(f"{r['id']}:a_on_b", _fields(r, r["proof_b"])) for r in recs], progress=p)
    rows, statuses = [], Counter()
    m = cfg.critic.n
    human = {"a": 0, "b": 0}
    verifier_vs_human = []
    for i, r in enumerate(recs):
        row: dict[str, Any] = {"id": r["id"], "proof_a": r["proof_a"], "proof_b": r["proof_b"]}
        for s in ("a", "b"):
            agg = aggregate([c.parsed for c in votes[s][i]], vpol)
            row[f"verifier_{s}"] = agg.accepts
            row[f"verifier_{s}_votes"] = agg.n_accept
            row[f"verifier_{s}_unparseable"] = agg.n_unparseable
            label = r.get(f"label_{s}") if cfg.use_human_labels else None
            if label is not None:
                human[s] += 1
                verifier_vs_human.append(agg.accepts == label)
            row[f"gold_{s}"] = bool(label) if label is not None else agg.accepts
            row[f"gold_{s}_source"] = "human" if label is not None else "vote_verifier"
        sagg = aggregate([c.parsed for c in self_calls[i]], cfg.self_verifier.aggregation())
        row["self_a"] = sagg.accepts
        row["crit_a"] = sum(c.parsed.accepts for c in crit_a[i])
        row["crit_a_unparseable"] = sum(not c.parsed.ok for c in crit_a[i])
        if crit_b is not None:
            row["crit_b"] = sum(c.parsed.accepts for c in crit_b[i])
            row["crit_b_unparseable"] = sum(not c.parsed.ok for c in crit_b[i])
        row["pick"] = route(row["self_a"], row["crit_a"], cfg.threshold)
        row["calls"] = {"verifier_a": [c.to_dict() for c in votes["a"][i]],
                        "verifier_b": [c.to_dict() for c in votes["b"][i]],
                        "self_a": [c.to_dict() for c in self_calls[i]],
                        "crit_a": [c.to_dict() for c in crit_a[i]]}
        if crit_b is not None:
            row["calls"]["crit_b"] = [c.to_dict() for c in crit_b[i]]
        for calls in row["calls"].values():
            statuses.update(c["parse_status"] for c in calls)
        rows.append(row)
    table = routing_table(rows, cfg.threshold, m)
    auc_ba = auc_mann_whitney([r["crit_a"] / m for r in rows], [r["gold_a"] for r in rows]) if rows else None
    auc_ab = (auc_mann_whitney([r["crit_b"] / m for r in rows], [r["gold_b"] for r in rows])
              if rows and crit_b is not None else None)
    result = {
        "n_records": len(recs), "n_skipped": len(errors), "n_generated": n_generated,
        "verifier_policy": dataclasses.asdict(cfg.verifier.aggregation()), "threshold": cfg.threshold, "m": m,
        "routing": table,
        "auc": {f"{cfg.name_b}_on_{cfg.name_a}": auc_ba, f"{cfg.name_a}_on_{cfg.name_b}": auc_ab},
        "gold_from_human": human,
        "verifier_accuracy_vs_human": (sum(verifier_vs_human) / len(verifier_vs_human)) if verifier_vs_human else None,
        "parse_counts": dict(sorted(statuses.items())),
        "errors": [str(e) for e in errors],
    }
    write_jsonl(out / JUDGMENTS, rows)
    write_metrics(out, result)
    write_report(out, result, cfg)
    c = table["cross_model"]
    print(f"tcs n={len(recs)} acc_a={_f(table['a']['accuracy'])} acc_b={_f(table['b']['accuracy'])} "
          f"self_rejection={_f(table['self_rejection']['accuracy'])} cross_model={_f(c['accuracy'])} "
          f"oracle={_f(table['oracle']['accuracy'])} auc={_f(auc_ba)}")
    print(f"wrote {out / 'report.md'}")
    return result


def _with_model(jc: JudgeConfig, model: str | None) -> JudgeConfig:
    return jc if jc.model is not None else dataclasses.replace(jc, model=model)


def _f(x: float | None) -> str:
    return "nan" if x is None else f"{x:.3f}"


def write_report(out: Path, res: dict[str, Any], cfg: TCSConfig) -> None:
    """Markdown shaped like TCS-Bench's Colosseum results, plus a threshold-sweep PNG (``verifier.results``)."""
    t = res["routing"]
    a, b = cfg.name_a, cfg.name_b
    c = t["cross_model"]
    systems = [(a, t["a"]), (b, t["b"]), (f"Self-rejection routing ({a}'s verifier)", t["self_rejection"]),
               (f"Cross-model selection (≤{c['threshold']}/{c['m']} critiques by {b})", c),
               ("Oracle best-of-two", t["oracle"])]
    lines = [
        "# TCS-Bench judging and routing report", "",
        f"input: `{cfg.input}` ({res['n_records']} tasks, {res['n_skipped']} skipped). Verifier: "
        f"{cfg.verifier.policy} k={cfg.verifier.k} of n={cfg.verifier.n}. Gold from human labels: "
        f"{res['gold_from_human']}, otherwise from the vote verifier.", "",
        *md_table(["System", "Accuracy %", "Solved"], ([name, pct(s["accuracy"]), f"{s['solved']}/{s['n']}"]
                                                         for name, s in systems), align="lrr"),
        "",
        f"Selection picks {a} on {c['picked_a']} tasks (accuracy {pct(c['acc_when_a'])}%) and {b} on {c['picked_b']} "
        f"({pct(c['acc_when_b'])}%). Critiques overturn {c['overturned']} self-accepted {a} proofs: {b} correct "
        f"{c['overturned_b_correct']} times, {a} {c['overturned_a_correct']}.", "",
        f"Critique AUC against gold: {b} judging {a} {_f(res['auc'][f'{b}_on_{a}'])}, "
        f"{a} judging {b} {_f(res['auc'][f'{a}_on_{b}'])}.", "",
        "Threshold sweep (accuracy %): " + ", ".join(f"{k}/{c['m']}: {pct(v)}" for k, v in t["sweep"].items()), "",
        f"Verifier accuracy against human labels: {pct(res['verifier_accuracy_vs_human'])}%", "",
        f"Calls by parse status (unparseable votes/critiques count as rejections): {res['parse_counts']}", "",
        "![threshold sweep](tcs_sweep.png)", ""]
    lines += [f"- skipped: {e}" for e in res["errors"]]
    write_markdown(out, lines)
    if t["a"]["n"]:
        fig, ax = figure((6, 3.2))
        ks = list(t["sweep"])
        ax.plot(ks, [100 * t["sweep"][k] for k in ks], "o-", label="cross-model selection")
        for key, style, lab in (("a", ":", a), ("b", "--", b), ("oracle", "-.", "oracle best-of-two"),
                                ("self_rejection", "-", "self-rejection only")):
            ax.axhline(100 * t[key]["accuracy"], ls=style, color="gray" if key != "oracle" else "C3", lw=1, label=lab)
        ax.set_xlabel(f"threshold t (submit {b} when ≤ t of {c['m']} critiques accept {a})")
        ax.set_ylabel("accuracy (%)")
        ax.legend(fontsize=7)
        save_figure(fig, out / "tcs_sweep.png")


@hydra_main("tcs", TCSConfig)
def main(cfg: TCSConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
