"""GRPO diagnosis: the KL to the warm start at any beta, and per-step plots.

TRL already logs, per logging step: ``reward``, ``rewards/<component>/mean``, ``reward_std``,
``frac_reward_zero_std`` (groups whose rewards are all equal: no gradient), ``completions/mean_length``,
``completions/clipped_ratio``, ``entropy`` and, only when ``beta > 0``, ``kl``. The rewards add
``completions/truncated_frac`` and ``completions/unparseable_frac`` (``training.rewards``). Missing is
how far the policy has moved from its warm start when ``beta == 0``; :class:`KLToInit` logs it as
``kl_to_init``. :func:`plot_train_logs` draws all of these per step (PNG). :func:`copy_rate` and
:func:`read_accuracy` tell whether a verifier reads the proof it judges (``style=check`` texts).

    python -m training.diagnostics runs/x/train_log.json [more logs] --out diagnostics.png
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from verifier.errors import InputError, run_command


class KLToInit:
    """``kl_to_init``: KL(warm start || policy) per completion token, on fixed samples of the warm start.

    At the start of training the warm start (a frozen copy) samples one completion for each of ``n``
    training prompts (the run's temperature and ``max_completion_length``); at every logging step the
    exact full-vocabulary KL between the two next-token distributions is averaged over those
    completions' tokens (an unbiased estimate of the sequence KL per token, since the samples come from
    the warm start). Logged at beta 0 too, where TRL has no reference model. A single-process diagnostic
    for small models (the copy doubles the model's memory); ``grpo.kl_to_init_samples`` turns it on.
    """

    def __init__(self, trainer: Any, n: int, seed: int = 0):
        # lazy: torch takes seconds to import; only a training run builds the probe
        import torch

        self.trainer = trainer
        model = trainer.accelerator.unwrap_model(trainer.model)
        self.ref = copy.deepcopy(model).eval()
        # TRL patches the policy's forward with a closure over the ORIGINAL model (trl.trainer.utils.add_fused_lm_head);
        # deepcopy keeps that closure, so the copy would run the policy: drop it, the class's forward is the model's own
        self.ref.__dict__.pop("forward", None)
        for p in self.ref.parameters():
            p.requires_grad_(False)
        tok = trainer.processing_class
        args = trainer.args
        prompts = [trainer.train_dataset[i]["prompt"] for i in range(min(n, len(trainer.train_dataset)))]
        texts = [tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) if isinstance(p, list) else p
                 for p in prompts]
        eos = tok.eos_token_id
        g = torch.Generator().manual_seed(seed)
        self.batches = []
        rng = torch.random.get_rng_state()  # sampling here must not move the training run's random stream
        with torch.no_grad():
            for text in texts:
                ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"].to(model.device)
                torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=g)))
                out = self.ref.generate(ids, do_sample=True, temperature=args.temperature or 1.0, top_p=1.0,
                                        max_new_tokens=args.max_completion_length, pad_token_id=tok.pad_token_id or eos)
                comp = out[0, ids.shape[1]:].tolist()
                if eos in comp:
                    comp = comp[: comp.index(eos) + 1]
                if comp:
                    self.batches.append((out[:, : ids.shape[1] + len(comp)], ids.shape[1]))
        torch.random.set_rng_state(rng)

    def value(self) -> float:
        """The mean per-token KL(warm start || current policy) over the fixed samples (nats)."""
        # lazy: torch takes seconds to import; only a training run builds the probe
        import torch

        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        was_training = model.training
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for ids, start in self.batches:
                lp = torch.log_softmax(_logits(model, ids)[0, start - 1:-1].float(), -1)
                lq = torch.log_softmax(_logits(self.ref, ids)[0, start - 1:-1].float(), -1)
                total += float((lq.exp() * (lq - lp)).sum())
                count += lp.shape[0]
        if was_training:
            model.train()
        if not count:
            raise RuntimeError("kl_to_init: no warm-start samples to measure on")
        return total / count

    def callback(self):
        """The ``TrainerCallback`` that adds ``kl_to_init`` to the step's metrics before TRL logs them."""
        # lazy: transformers takes seconds to import; only a training run asks the callback
        from transformers import TrainerCallback

        outer = self

        class _KL(TrainerCallback):
            def on_step_end(self, args, state, control, **kw):
                if state.global_step == 1 or state.global_step % max(1, int(args.logging_steps)) == 0:
                    metrics = getattr(outer.trainer, "_metrics", None)  # TRL's per-step metric store (trl 1.16)
                    if metrics is None:
                        raise RuntimeError("KLToInit needs GRPOTrainer._metrics (trl>=1.16,<1.17)")
                    metrics["train"]["kl_to_init"].append(outer.value())

        return _KL()


def _logits(model: Any, ids: Any) -> Any:
    """Full-vocabulary logits from the model class's own forward (not TRL's fused-LM-head patch)."""
    return type(model).forward(model, input_ids=ids).logits


def attach_kl_to_init(trainer: Any, n: int, seed: int = 0) -> KLToInit | None:
    """Log ``kl_to_init`` on ``trainer`` with ``n`` fixed warm-start samples (``n == 0``: nothing)."""
    if n <= 0:
        return None
    kl = KLToInit(trainer, n, seed)
    trainer.add_callback(kl.callback())
    return kl


# ------------------------------------------------------------------------------------------- plots

PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("training reward per component", ("reward", "rewards/")),
    ("completion length (tokens)", ("completions/mean_length", "completions/mean_terminated_length")),
    ("truncated / unparseable fraction", ("completions/truncated_frac", "completions/clipped_ratio",
                                          "completions/unparseable_frac")),
    ("groups with zero reward variance (no gradient)", ("frac_reward_zero_std",)),
    ("optimizer steps skipped (zero gradient, cumulative)", ("optim/skipped_steps",)),
    ("KL to the warm start (nats/token)", ("kl_to_init", "kl")),
    ("policy entropy (nats/token)", ("entropy",)),
)


def series(log_history: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one logged metric (rows without it, or with a null / NaN value, skipped).

    >>> series([{"step": 1, "kl": 0.1}, {"step": 2, "loss": 1.0}, {"step": 3, "kl": None}], "kl")
    ([1], [0.1])
    """
    xs, ys = [], []
    for row in log_history:
        v = row.get(key)
        if isinstance(v, (int, float)) and not math.isnan(v) and "step" in row:
            xs.append(int(row["step"]))
            ys.append(float(v))
    return xs, ys


def panel_keys(log_history: Sequence[Mapping[str, Any]], prefixes: Sequence[str]) -> list[str]:
    """The logged keys a panel draws: exact names, and every key under a name ending in ``/``."""
    keys = sorted({k for row in log_history for k in row})
    out = []
    for p in prefixes:
        if p.endswith("/"):
            out += [k for k in keys if k.startswith(p) and k.endswith("/mean")]
        elif p in keys:
            out.append(p)
    return out


def plot_train_logs(logs: Mapping[str, Sequence[Mapping[str, Any]]], path: Path | str, title: str = "") -> Path:
    """One PNG of the GRPO diagnosis: a panel per quantity of ``PANELS``, a line per run and metric."""
    # lazy: matplotlib is slow to import and needs its backend set first; only the plot uses it
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["-", "--", ":", "-."]
    for ax, (name, prefixes) in zip(axes.flat, PANELS):
        drawn = 0
        for ri, (run, hist) in enumerate(logs.items()):
            for ki, key in enumerate(panel_keys(hist, prefixes)):
                xs, ys = series(hist, key)
                if xs:
                    ax.plot(xs, ys, styles[ki % len(styles)], color=colors[ri % len(colors)], marker=".",
                            label=f"{run}: {key}" if len(logs) > 1 else key, alpha=0.85)
                    drawn += 1
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("GRPO step")
        if drawn:
            ax.legend(fontsize=6)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def summarize(log_history: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """First and last value and mean of every diagnosed metric of a run (for reports)."""
    out = {}
    for _, prefixes in PANELS:
        for key in panel_keys(log_history, prefixes):
            _, ys = series(log_history, key)
            if ys:
                out[key] = {"first": ys[0], "last": ys[-1], "mean": sum(ys) / len(ys)}
    return out


def hf_samples(model_dir: Path | str, prompts: Sequence[Any], temperature: float, max_new_tokens: int,
               seed: int = 0, batch: int = 256) -> list[tuple[str, str]]:
    """(text, finish reason) of one sample per chat prompt with Hugging Face ``generate`` (no server): the
    diagnoses' view of a small model's outputs on training problems. ``temperature`` 0 is greedy."""
    import torch  # lazy: torch and transformers load only when a diagnosis runs
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    torch.manual_seed(seed)
    sample = {"do_sample": True, "temperature": temperature, "top_p": 1.0} if temperature > 0 else {"do_sample": False}
    res: list[tuple[str, str]] = []
    for i in range(0, len(prompts), batch):
        texts = [tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts[i:i + batch]]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new_tokens,
                                 pad_token_id=tok.pad_token_id or tok.eos_token_id, **sample)
        for row in out[:, enc["input_ids"].shape[1]:].tolist():
            res.append((tok.decode(row, skip_special_tokens=True), "stop" if tok.eos_token_id in row else "length"))
    return res


def copy_rate(gold, judgments_jsonl: Path) -> float:
    """Fraction of judging passes whose first line copies the proof's step 0 exactly (``Step 0: <step 0>``, the
    first line of every ``style="check"`` gold text): whether the verifier reads the proof it judges or writes a
    chain of its own (docs/training.md, "Does a verifier read long proofs?")."""
    from verifier.judgment import load_judgments

    first = {t.id: f"Step 0: {t.proof_steps[0]}" for t in gold}
    hits = total = 0
    for j in load_judgments(judgments_jsonl, passes_only=True):
        for p in j.passes:
            total += 1
            hits += p.raw_text.split("\n", 1)[0].strip() == first.get(j.id)
    return hits / total if total else 0.0


_CHECK_LINE = re.compile(r"Step (\d+): (?:(?P<text>.+) \| )?(?P<start>\S+) vs (?P<prev>\S+), (?:ok|fatal)")


def read_accuracy(gold, judgments_jsonl: Path) -> dict[str, Any]:
    """Whether the verifier reads each step it checks (docs/training.md): over the judging
    passes, the fraction of ``Step i: <start> vs <previous>`` lines (``style=check`` or ``copy_check``) whose
    start is the start the proof's step i writes, per step i >= 1 (``start_by_step``), and at the first fatal
    step of a ``wrong_operand`` proof (``fatal_start``: the one line where reading the proof and the shortcut
    start = previous result differ; ``fatal_shortcut`` counts the lines that wrote the previous result)."""
    from data_pipeline.synthetic import step_start
    from verifier.judgment import load_judgments

    by_id = {str(t.id): t for t in gold}
    per_step: dict[int, list[int]] = {}
    fatal = [0, 0, 0]  # read right, shortcut, lines
    for j in load_judgments(judgments_jsonl, passes_only=True):
        t = by_id.get(j.id)
        if t is None:
            raise InputError(f"read_accuracy: record {j.id!r} of {judgments_jsonl} is not in the gold set")
        info = (t.meta or {}).get("synthetic") or {}
        k = t.annotation.first_fatal_error_step if t.annotation else -1
        for p in j.passes:
            for line in p.raw_text.splitlines():
                m = _CHECK_LINE.match(line.strip())
                if not m or not 1 <= int(m.group(1)) < len(t.proof_steps):
                    continue
                i = int(m.group(1))
                want = step_start(t.proof_steps[i])
                hit = per_step.setdefault(i, [0, 0])
                hit[0] += m.group("start") == want
                hit[1] += 1
                if i == k and info.get("fatal_kind") == "wrong_operand":
                    fatal[0] += m.group("start") == want
                    fatal[1] += m.group("start") == m.group("prev")
                    fatal[2] += 1
    return {"start_by_step": {i: a / n for i, (a, n) in sorted(per_step.items())},
            "fatal_start": fatal[0] / fatal[2] if fatal[2] else 0.0,
            "fatal_shortcut": fatal[1] / fatal[2] if fatal[2] else 0.0, "fatal_lines": fatal[2]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Plot GRPO diagnosis curves from train_log.json files")
    ap.add_argument("logs", nargs="+", help="train_log.json files (or run dirs holding one)")
    ap.add_argument("--out", default="grpo_diagnostics.png")
    a = ap.parse_args(argv)
    logs = {}
    for p in map(Path, a.logs):
        f = p / "train_log.json" if p.is_dir() else p
        if not f.is_file():
            raise InputError(f"{f}: no train_log.json")
        logs[str(f.parent)] = json.loads(f.read_text())
    print(f"wrote {plot_train_logs(logs, a.out)}")


def mixed_share(gold: list[Any], judgments: Path) -> float:
    """The share of records whose passes' meta rewards differ: GRPO groups with a gradient (at beta 0)."""
    from verifier.judgment import load_judgments
    from verifier.meta_verifier import RuleMetaVerifier

    rule, by_id = RuleMetaVerifier(), {j.id: j for j in load_judgments(judgments)}
    mixed = [len({rule.grade(t, p).grade.reward if p.ok else 0.0 for p in by_id[t.id].passes}) > 1 for t in gold]
    return sum(mixed) / max(1, len(mixed))


if __name__ == "__main__":
    run_command("training.diagnostics", main)
