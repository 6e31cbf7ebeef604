"""`make bench-loop`: the prover-verifier loop (``training.loop``) at CPU scale, with an expert and without one.

On the synthetic task (3-step chains of one-digit operands: every proof's truth is known exactly) three arms, each
from the same round 0 (the tiny model SFT'd on gold proofs, the verifier's warm start on planted errors, prover GRPO
against it):

1. ``expert``: ``rounds`` rounds of the loop with the simulated expert (the exact checker writing appendix-C
   annotations through the Label Studio export and ingest) as the annotator (``OUT/expert``);
2. ``autolabel``: the same rounds with the expert-free labeller (``data_pipeline.autolabel``; ``OUT/autolabel``,
   round 0 shared with the expert arm). A verifier that was never taught to meta-verify is refused at the first
   ``annotate`` stage (``MetaVerifierSilent``): the arm is reported as refused with the reason and
   ``autolabel_true_acc_final`` is ``nan`` (reports/autolabel_2026-12-07_against_truth.md);
3. ``gold``: the positive control, prover GRPO from the same SFT prover with the exact checker as the reward
   (``prover.reward=gold``), as many steps as the final prover's GRPO (``OUT/expert/gold``);
4. ``sft``: the SFT prover every prover starts from, on the same held-out problems (``OUT/expert/sft``): a final
   prover below it was damaged by the loop, whatever its gain over round 0.

Every round also checks its new verifier before the prover trains against it (stage ``check``: TPR / TNR on the
round's own proofs, training problems, exact truth). The settings of the rounds are those of the registered
from-SFT run (``prover_from=sft budget=96 annotation_weight=2``; reports/loop_2026-12-07_from_sft.md).

Resumable: every stage of every arm records its settings (``training.stages``); re-run the same command after a kill.
Options as ``key=value`` (``BenchConfig``; the prover's settings are bench-prover's). Writes ``OUT/report.md`` (the
arms' per-round tables) beside each arm's ``report.md`` and ``loop.png``. Last line, exactly:
``rounds=<n> true_acc_r0=<r> true_acc_final=<r> true_gain_ci_low=<r> gold_true_acc=<r> hacking_r0=<r>
hacking_final=<r> exploit_rate_final=<r> autolabel_true_acc_final=<r>``
(``r0``: the prover trained against the first verifier; ``final``: after the last round of the expert arm;
``true_gain_ci_low``: the lower bound of the 95% CI of final - r0 true accuracy, paired on the held-out proofs,
clustered by problem; ``exploit_rate_final``: the hack audit's exploit rate in the last round's prover GRPO).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import InputError, environment, last_line, run_command, set_options
from data_pipeline.autolabel import MetaVerifierSilent
from training.tiny_task import ProverBudget

environment(wandb=True)

LAST_LINE_KEYS = ("rounds", "true_acc_r0", "true_acc_final", "true_gain_ci_low", "gold_true_acc", "hacking_r0",
                  "hacking_final", "exploit_rate_final", "autolabel_true_acc_final")


@dataclass
class BenchConfig(ProverBudget):
    """The prover's settings: bench/bench_prover.py's (``training.tiny_task.ProverBudget``: model, task, SFT, GRPO,
    sampling). GRPO: the budget make diagnose-control chose for bench-prover (16 problems x 8 per step, lr 3e-5; 4
    problems per step at lr >= 1e-4 lowered the gold-reward true rate; reports/prover_2026-12-06_positive_control.md),
    ``grpo_steps`` per round."""

    out: str = "runs/bench_loop"
    # another bench-loop folder whose finished round 0 (same round-0 settings) the expert arm reuses
    round0_from: str | None = None
    seed: int = 0
    rounds: int = 2  # rounds after round 0, the same for both labeller arms
    # The loop's SFT recipe (gold proofs plus revision and repair prompts) at 1200 steps: make diagnose-control
    # recipe=loop found no checkpoint of it from which gold GRPO (24 x 128 on one round's problems) raises the true
    # rate on other training problems, and the schedule ends inside a sharp rise of the prover's accuracy, so the SFT
    # prover differs between machines (reports/loop_2026-12-07_sft_start_diagnosis.md); a 2000-step schedule gave a
    # positive control on seed 0 only (reports/loop_2026-12-07_sft2000_start.md), so this start stays
    prover_sft_steps: int = 1200
    prover_sft_checkpoint: int = 0  # the SFT prover: this checkpoint of the schedule (0: its final weights)
    prover_sft_from: str | None = None  # a finished SFT prover folder of the loop's recipe instead of the SFT here
    # the loop's own settings (training.loop.LoopConfig defaults)
    n_round_problems: int = 64
    # held-out: 200 problems x 8 proofs, clustered by problem (the positive control needed ~200 problems x 8 to
    # resolve a gain of ~6 points: reports/prover_2026-12-07_positive_control_fresh.md)
    n_heldout: int = 200
    eval_proofs: int = 8
    # Rounds: the settings of the registered from-SFT run (reports/loop_2026-12-07_from_sft.md), chosen there from the
    # training side of the one-round run: a round that continued round 0's prover first had to undo round 0's
    # hacking, and 32 annotations beside 160 planted records were 17% of the verifier's retraining rows.
    budget: int = 96
    annotation_weight: int = 2  # copies of each annotated proof in the verifier's retraining data
    prover_from: str = "sft"  # each round's prover GRPO starts from: previous | sft (round 0's SFT prover)
    k: int = 2
    verifier_sft_steps: int = 300
    refresh_sft_steps: int = 50
    verifier_grpo_steps: int = 16
    bootstrap_n: int = 1000
    wandb: bool = True  # one W&B run per round (offline without WANDB_API_KEY)


def parse_options(argv: list[str]) -> BenchConfig:
    """``key=value`` options onto ``BenchConfig``; an unknown or ill-typed key is one clear error."""
    cfg = set_options(BenchConfig(), argv, sort=True)
    if cfg.rounds < 1:
        raise InputError(f"rounds={cfg.rounds}: at least 1")
    return cfg


def loop_config(cfg: BenchConfig, arm: str) -> Any:
    """The ``LoopConfig`` of one labeller arm (``expert`` | ``autolabel``)."""
    from training.loop import LoopConfig
    from verifier.results import WandbConfig

    shared = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
              if f.name not in ("out", "wandb") and f.name in {g.name for g in dataclasses.fields(LoopConfig)}}
    out = Path(cfg.out)
    first = str(out / "expert") if arm == "autolabel" else str(Path(cfg.round0_from) / "expert") \
        if cfg.round0_from else None
    return LoopConfig(**shared, out=str(out / arm), annotator="simulated_expert" if arm == "expert" else "autolabel",
                      share_round0=first,
                      wandb=WandbConfig(enabled=cfg.wandb, project="proofverifier-loop", mode="auto"))


def line_values(expert: dict[str, Any], autolabel: dict[str, Any], gold: dict[str, Any], rounds: int
                ) -> tuple[dict[str, Any], str, dict[str, str]]:
    """The last line's values (``None``: ``nan``), its number format and per-key formats (for ``last_line``)."""
    r0, final = expert["rounds"][0], expert["rounds"][-1]
    return ({"rounds": rounds, "true_acc_r0": r0.get("true_acc"), "true_acc_final": final.get("true_acc"),
             "true_gain_ci_low": (expert.get("true_gain") or {}).get("ci", [None])[0],
             "gold_true_acc": gold.get("true_acc"), "hacking_r0": r0.get("hacking_rate"),
             "hacking_final": final.get("hacking_rate"), "exploit_rate_final": final.get("exploit_rate"),
             "autolabel_true_acc_final": autolabel["rounds"][-1].get("true_acc")}, ".4f", {"rounds": "d"})


def _pct(v: Any) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def markdown(cfg: BenchConfig, reports: dict[str, dict[str, Any]], gold: dict[str, Any], seconds: float,
             sft: dict[str, Any] | None = None) -> str:
    out = Path(cfg.out)
    lines = ["# bench-loop: the prover-verifier loop with an expert, without one, and the exact reward", "",
             f"Rounds after round 0: {cfg.rounds}; held-out: {gold.get('n')} proofs ({cfg.eval_proofs} per problem, "
             "problems in no training set; intervals clustered by problem); true = the exact checker, accepted = all "
             "passes of the round's verifier, hacking = accepted but false. Each arm's per-round table: "
             + ", ".join(f"[{a}]({a}/report.md)" for a in reports) + ".", "",
             "| arm | true % r0 | true % final | gain [95% CI] | hacking % r0 | hacking % final | Meta BF1 final | "
             "false accepted % final |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for arm, rep in reports.items():
        if "refused" in rep:
            lines.append(f"| {arm} | refused: {rep['refused']} | | | | | | |")
            continue
        r0, fin, g = rep["rounds"][0], rep["rounds"][-1], rep["true_gain"]
        ci = g.get("ci") or [None, None]
        lines.append(f"| {arm} | {_pct(r0['true_acc'])} | {_pct(fin['true_acc'])} | {_pct(g.get('delta'))} "
                     f"[{_pct(ci[0])}, {_pct(ci[1])}] | {_pct(r0['hacking_rate'])} | {_pct(fin['hacking_rate'])} | "
                     f"{_pct(fin.get('verifier_meta_bf1'))} | {_pct(fin.get('verifier_false_accept'))} |")
    c = (reports.get("expert") or {}).get("control_gain") or {}
    cc = c.get("ci") or [None, None]
    lines += [f"| gold (exact reward) | | {_pct(gold.get('true_acc'))} | "
              + (f"gold - SFT: {_pct(c.get('delta'))} [{_pct(cc[0])}, {_pct(cc[1])}]" if c else "")
              + f" | | {_pct(gold.get('hacking_rate'))} | | |"]
    if sft:
        g = (reports.get("expert") or {}).get("sft_gain") or {}
        ci = g.get("ci") or [None, None]
        lines.append(f"| SFT prover (the start) | | {_pct(sft.get('true_acc'))} | expert final - SFT: "
                     f"{_pct(g.get('delta'))} [{_pct(ci[0])}, {_pct(ci[1])}] | | {_pct(sft.get('hacking_rate'))} | | |")
    lines += ["", f"Total {seconds / 60:.1f} min (resumed stages not timed). Folder: {out}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    cfg = parse_options(sys.argv[1:] if argv is None else argv)
    import torch

    torch.set_num_threads(1)
    from training.loop import Loop, write_report

    t0 = time.monotonic()
    reports = {}
    for arm in ("expert", "autolabel"):
        print(f"[bench-loop] arm {arm}", flush=True)
        try:
            reports[arm] = Loop(loop_config(cfg, arm)).run()
        except MetaVerifierSilent as e:  # a verifier never taught to meta-verify: no labels to train on
            print(f"[bench-loop] arm {arm} refused: {e}", flush=True)
            reports[arm] = {"refused": str(e), "rounds": [{}], "true_gain": {}}
    print("[bench-loop] arm gold (prover GRPO with the exact checker as reward)", flush=True)
    expert = Loop(loop_config(cfg, "expert"))
    gold = expert.gold_control()
    print("[bench-loop] the SFT prover (every prover's start) on the held-out problems", flush=True)
    sft = expert.sft_control()
    reports["expert"] = write_report(expert.out, cfg.rounds, cfg.bootstrap_n, cfg.seed)  # with both controls
    md = markdown(cfg, reports, gold, time.monotonic() - t0, sft)
    (Path(cfg.out) / "report.md").write_text(md)
    print(md)
    last_line(*line_values(reports["expert"], reports["autolabel"], gold, cfg.rounds))


if __name__ == "__main__":
    run_command("bench-loop", main)
