"""Training data: the (train, held-out) trajectories of a data config, and prompts cut to a token budget."""

from __future__ import annotations

import logging
import random
from pathlib import Path

from data_pipeline import synthetic
from data_pipeline.splits import split_by_problem
from training.config import DataConfig
from verifier.errors import InputError
from verifier.formats import SHARED_DATA, load_processbench
from verifier.identity import ProblemIndex, assert_disjoint
from verifier.io import load_trajectories

log = logging.getLogger("training.data")


def load_trajectories_for(cfg: DataConfig):
    """(train, eval) annotated trajectories for a data config; counts every skipped record."""

    def annotated(trajs, what):
        keep = [t for t in trajs if t.annotation is not None and not t.annotation.report_error_case]
        if len(keep) < len(trajs):
            log.warning("%s: skipped %d records without a usable annotation (unannotated or report_error_case)",
                        what, len(trajs) - len(keep))
        return keep

    if cfg.source == "synthetic":
        kw = dict(cfg.synthetic)
        # Variants (extra_ann, pos_aug) are synthetic knobs in configs/experiment/*.yaml; on real data
        # they are JSONL files from the data pipeline (data.source=jsonl).
        train = synthetic.generate_synthetic(cfg.n_train, seed=cfg.seed, **kw)
        kw.pop("valid_fraction", None)  # the held-out set keeps the default balance whatever the variant
        held = synthetic.generate_synthetic(cfg.n_eval, seed=cfg.seed + 10_000, **kw)
        # held-out problems must not overlap the training problems
        train_index = ProblemIndex(train)
        overlap = [t for t in held if train_index.shared(t) is not None]
        if overlap:
            held = [t for t in held if train_index.shared(t) is None]
            log.warning("synthetic: dropped %d held-out records sharing a problem with training", len(overlap))
        return annotated(train, "train"), annotated(held, "eval")
    if cfg.source == "processbench":
        path = Path(cfg.train_path) if cfg.train_path else SHARED_DATA / "processbench" / "gsm8k.json"
        trajs = annotated(load_processbench(path), str(path))
        # the held-out split of data_pipeline.splits: whole problems on one side, stratified, seeded
        if cfg.eval_path:
            held = annotated(load_trajectories(cfg.eval_path).records, cfg.eval_path)[: cfg.n_eval]
            held_index = ProblemIndex(held)
            train = [t for t in trajs if held_index.shared(t) is None]
            if len(train) < len(trajs):
                log.warning("%s: left out %d training records whose problem is in %s", path,
                            len(trajs) - len(train), cfg.eval_path)
        else:
            # n_eval=null (profile=cluster): the paper's held-out size, 94 proofs (section 5.4)
            split = split_by_problem(trajs, held_out_size=94 if cfg.n_eval is None else cfg.n_eval, seed=cfg.seed)
            train, held = list(split.train), split.held_out
        random.Random(cfg.seed).shuffle(train)  # gsm8k lists its erroneous proofs first
        train = train[: cfg.n_train]
        assert_disjoint(train, held)
        return train, held
    if cfg.source == "jsonl":
        if not cfg.train_path:
            raise InputError("data.source=jsonl needs data.train_path")
        train = annotated(load_trajectories(cfg.train_path).records, cfg.train_path)
        if cfg.n_train:
            train = train[: cfg.n_train]
        held = annotated(load_trajectories(cfg.eval_path).records, cfg.eval_path) if cfg.eval_path else []
        return train, held[: cfg.n_eval] if cfg.n_eval else held
    raise InputError(f"unknown data.source {cfg.source!r} (expected synthetic, processbench or jsonl)")


def truncate_prompts(dataset, tokenizer, max_tokens: int | None):
    """Keep prompts within ``max_tokens`` by cutting the middle of the proof text (never the answer format)."""
    if not max_tokens:
        return dataset

    def cut(row):
        msg = row["prompt"][-1]["content"]
        ids = tokenizer(msg, add_special_tokens=False)["input_ids"]
        if len(ids) <= max_tokens:
            return row
        head, tail = max_tokens // 3, max_tokens - max_tokens // 3
        text = tokenizer.decode(ids[:head]) + "\n[...]\n" + tokenizer.decode(ids[-tail:])
        row["prompt"] = row["prompt"][:-1] + [{"role": row["prompt"][-1]["role"], "content": text}]
        return row

    return dataset.map(cut)
