"""Does ACL beat cross-entropy at a real budget? CE, CE + SupCon, ACL-Embed, ACL-Embed + ACL-Grad
and logistic regression on frozen embeddings, on Banking77, emotion and SST-2 (full and 10-shot).

Protocol (all choices on validation only; test scored for every run but read only for the
chosen configuration's seeds):
- Base model: the bundled all-MiniLM-L6-v2 with a label-embedding head (cosine logits x 20).
- Validation: emotion and SST-2 their own; Banking77 has none, so the package's dev-split rule
  (``load_dataset``: a stratified 10% of train, seed 0) holds one out and every Banking77 model
  trains on the other 90%. (Runs logged before that rule used an unstratified 10%, seed 0.)
- Tuning (the shared protocol, ``contrastive_bert.benchmarking.protocol``: a grid per regime): CE
  picks the encoder learning rate; CE + SupCon and ACL-Embed pick (lambda, tau) at CE's rate
  (``builds_on``); ACL-Embed + ACL-Grad reuses ACL-Embed's choice (the gate is its only difference).
  One seed per configuration (seed 0); the chosen configuration's seed-0 run is also its first final seed.
- Seeds: 3 (full) and 5 (10-shot; each seed draws its own 10 examples per class).
- ACL-Grad gates on the cheap angle (head + last encoder layer, every step); on every
  ``AUDIT_EVERY``-th step it also takes the exact angle (all parameters) and records whether the
  two decisions agree. SupCon and ACL-Embed run the same estimate at threshold 180 (never gates a
  finite angle, so their gradient is the ungated one) every 10 steps, to log their angles.
  Audit time is measured and reported apart from training time.
- A short timing block (``cost``) measures the seconds per step of CE, ACL-Embed, the ACL-Grad
  variants and the encoded label head, interleaved step by step on the same batches.
- Batch order: the ``full`` and ``10-shot`` regimes ran on sentence-transformers' ``group_by_label``
  order (kept for them: their runs are logged); ``full16k`` on the package's ``acl`` order,
  :class:`~contrastive_bert.losses.acl_embed.ClassMixedBatchSampler` (every class all epoch long; the
  ``group_by_label`` order ends each epoch with the two largest classes only, issue 38).

Regime ``full16k`` (issue 38: the 3,000-row sample's choice did not carry over to all of train): emotion
on all 16,000 training rows, 3 epochs (~1,500 steps, ~20 min a run on 2 CPU cores). CE, CE + SupCon,
ACL-Embed and ACL-Embed with encoded names, each at the (lambda, tau) the sample chose, try two rate
settings on dev at seed 0: the sample's (encoder 2e-4, head 5e-3) and a lower one (5e-5, head 1e-3;
an encoded head has no parameters, so only the encoder's rate varies for it). Seeds 1-2 run only for the
better of CE / CE + SupCon on dev and the better ACL row on dev (``Grid.select``). One more run, the
encoded method at the sample's setting in the old ``group_by_label`` order (seed 0), measures the batch
order's effect. Every run also scores a logistic regression on its own trained embeddings (``probe``):
how far the label head falls behind a linear probe of the same encoder.

Resumable (``contrastive_bert.benchmarking.RunLog``): every finished run is one line of the run
log (``acl_quality_runs.jsonl``) and is skipped on restart; ``acl_quality.json`` (the shared result shape:
``{"settings": {"DATASET/REGIME": {method: entry}}, "comparisons": {"DATASET/REGIME": verdict}}``) and
``acl_quality_protocol.json`` (the protocol, the shrunk training samples, ACL-Grad's cost), each
with the environment block, are rebuilt from the log after every run and are valid with partial results. Run in the background:

    OMP_NUM_THREADS=1 nohup .venv/bin/python eval/bench_acl.py > /tmp/bench_acl.log 2>&1 &

``--plan`` prints the remaining runs in order without training; ``--only banking77:full,cost:cost``
picks blocks (``dataset:regime``, in that order); ``--max-minutes`` stops before a run that would
not finish.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from contrastive_bert.benchmarking import (
    RunLog,
    add_common_arguments,
    json_safe,
    run_key as stable_key,
    setup_from_args,
    write_results,
)
from contrastive_bert.benchmarking.protocol import Grid, Method, Run, paired_difference
from contrastive_bert.benchmarking.results import mean_std
from contrastive_bert.inference.general_ability import general_ability, summarize_general

logger = logging.getLogger("bench_acl")

RESULTS = Path(__file__).resolve().parent / "results"
DATASETS = ("banking77", "emotion", "sst2")
REGIMES = ("full", "10-shot", "full16k")
REGIME_DATASETS = {"full": DATASETS, "10-shot": DATASETS, "full16k": ("emotion",)}
TRAINED_METHODS = ("ce", "supcon", "acl_embed", "acl_embed_encoded", "acl_embed_grad")
# acl_embed_encoded: ACL-Embed whose label rows are the encoder's embeddings of the label names
ORDER_DIAGNOSTIC = "acl_embed_encoded_group_by_label"  # full16k: the encoded method in the old batch order, seed 0
ENCODED_LABELS = {"acl_embed_encoded": "acl_embed", ORDER_DIAGNOSTIC: "acl_embed"}  # bench method -> package method (+ label_embedding="encoded")
GRAD_SEEDS_IF_GATED_OVER = 0.05  # ACL-Grad: one run at ACL-Embed's choice; all seeds only if it gates > 5% of steps
SEEDS = {"full": [0, 1, 2], "10-shot": [0, 1, 2, 3, 4]}
REGIME_SEEDS = {**SEEDS, "full16k": [0, 1, 2]}
TRAIN_SAMPLES = {"banking77": None, "emotion": 3000, "sst2": 3000}  # budget: 2 shared CPU cores, ~8 h in all
MAX_SEQ_LENGTH = {"banking77": 32, "emotion": 48, "sst2": 48}
SHOTS = 10
EPOCHS_FULL = 3
MIN_STEPS_FEW_SHOT = 150  # 10-shot: at least 3 epochs and at least this many steps
BATCH_SIZE = 32
HEAD_LEARNING_RATE = 5e-3
LEARNING_RATES = {"full": [1e-4, 2e-4], "10-shot": [1e-4, 2e-4, 5e-4]}
CONTRASTIVE = {"full": [(0.1, 0.3), (0.5, 0.1)], "10-shot": [(0.1, 0.3), (0.5, 0.1), (1.0, 0.1)]}  # (lambda, tau)
# full16k: each method at the (lambda, tau) the 3,000-row sample chose (emotion/full), two rate settings on dev
FULL16K_PAIRS = {"supcon": (0.1, 0.3), "acl_embed": (0.5, 0.1), "acl_embed_encoded": (0.5, 0.1)}
FULL16K_RATES = ({"learning_rate": 2e-4, "head_learning_rate": 5e-3}, {"learning_rate": 5e-5, "head_learning_rate": 1e-3})
# the batch order of each regime's runs (see the module doc); runs that name their own keep it (spec["batch_order"])
BATCH_ORDER = {"full": "group_by_label", "10-shot": "group_by_label", "full16k": "class_mixed"}
PROBE_REGIMES = ("full16k",)  # runs that also score a logistic regression on their own trained embeddings
ANGLE_THRESHOLD = 90.0
AUDIT_EVERY = 20
LOG_ANGLE_EVERY = 10
# Run order: emotion on all 16,000 rows first (issue 38; 12 runs of ~20 min and a logistic regression), then
# the blocks already done: ACL-Grad's cost (short), emotion full (3,000 rows), Banking77 full (~8 min a run),
# SST-2 full (3,000 rows), the 10-shot rows.
BLOCKS = [("emotion", "full16k"), ("cost", "cost"), ("emotion", "full"), ("banking77", "full"), ("sst2", "full"),
          ("banking77", "10-shot"), ("emotion", "10-shot")]
COST_VARIANTS = {  # ACLEmbedLoss options, lambda 0.5, tau 0.1
    "ce": {"mode": "ce", "gradient_gating": False},
    "acl_embed": {"gradient_gating": False},
    "acl_embed_grad_exact": {"angle_parameters": "all"},
    "acl_embed_grad_head_last_layer": {"angle_parameters": "head_last_layer"},
    "acl_embed_grad_exact_every5": {"angle_parameters": "all", "angle_every": 5},
    "acl_embed_encoded": {"gradient_gating": False, "label_embedding": "encoded"},
}
COST_ROUNDS, COST_WARMUP, COST_CLASSES_PER_BATCH = 30, 2, 16


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_arguments(parser, output=RESULTS / "acl_quality.json", run_log=RESULTS / "acl_quality_runs.jsonl",
                         methods=[f"{d}:{r}" for d, r in BLOCKS] + [f"{d}:{r}" for d in DATASETS for r in REGIMES
                                                                   if d in REGIME_DATASETS[r] and (d, r) not in BLOCKS])
    parser.add_argument("--max-runs", type=int, default=None, help="stop after this many new runs")
    parser.add_argument("--plan", action="store_true", help="print the next runs and exit")
    return parser.parse_args(argv)


# --------------------------------------------------------------------------- data


def _subsample(split, n: int | None, seed: int = 0):
    return split if n is None or len(split) <= n else split.shuffle(seed=seed).select(range(n))


def train_samples(name: str, regime: str) -> int | None:
    """The training rows a regime samples from a data set's train split (None: all of it)."""
    return None if regime == "full16k" else TRAIN_SAMPLES[name]


def load_splits(name: str, data_dir: str | None, eval_rows: int | None = None, regime: str = "full") -> dict:
    """train / dev / test (``text``, ``label``) and the label names of one data set, per the protocol
    (dev: the data set's ``validation`` split, carved from train by the package's rule if it has none)."""
    from contrastive_bert.data import load_dataset

    data = load_dataset(name, data_dir=data_dir)
    names = list(data["train"].features["label"].names)
    train, dev = data["train"], data["validation"]
    train = _subsample(train, train_samples(name, regime))
    cols = ["text", "label"]
    dev, test = _subsample(dev, eval_rows), _subsample(data["test"], eval_rows)
    return {"train": train.select_columns(cols), "dev": dev.select_columns(cols), "test": test.select_columns(cols), "names": names}


def few_shot(train, shots: int, seed: int):
    """``shots`` rows per class drawn with ``seed`` (all rows of a class with fewer)."""
    rng = np.random.default_rng(seed)
    labels = np.asarray(train["label"])
    picked = [rng.choice(np.flatnonzero(labels == k), size=min(shots, int((labels == k).sum())), replace=False)
              for k in np.unique(labels)]
    return train.select(sorted(int(i) for i in np.concatenate(picked)))


def train_rows(splits: dict, regime: str, seed: int):
    return few_shot(splits["train"], SHOTS, seed) if regime == "10-shot" else splits["train"]


# --------------------------------------------------------------------------- runs


KEY_EXTRAS = ("head_learning_rate", "batch_order")  # in the key only where the spec has them (full16k), so older keys stay


def run_key(spec: dict) -> str:
    fields = ("dataset", "regime", "method", "learning_rate", "contrastive_weight", "temperature", "seed", "variant", "round")
    return stable_key({**{k: spec.get(k) for k in fields}, **{k: spec[k] for k in KEY_EXTRAS if k in spec}})


def _scores(gold: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    from sklearn.metrics import f1_score

    return {"accuracy": float((gold == predicted).mean() * 100), "macro_f1": float(f1_score(gold, predicted, average="macro") * 100)}


def angle_stats(history: list[dict]) -> dict:
    """Gated share, mean angle, and how often the cheap estimate's decision at ``ANGLE_THRESHOLD``
    agrees with the exact angle's on the audited steps, from ``loss.angle_history``."""
    angles = [h["angle"] for h in history if math.isfinite(h["angle"])]
    pairs = [(h["angle"], h["exact_angle"]) for h in history
             if "exact_angle" in h and math.isfinite(h["angle"]) and math.isfinite(h["exact_angle"])]
    exact = [e for _, e in pairs]
    return {
        "decisions": len(history),
        "gated_share": (sum(bool(h["gated"]) for h in history) / len(history)) if history else None,
        "mean_angle": statistics.fmean(angles) if angles else None,
        "angles": [round(a, 2) for a in angles],
        "audited": len(pairs),
        "agreement_with_exact": (sum((a > ANGLE_THRESHOLD) == (e > ANGLE_THRESHOLD) for a, e in pairs) / len(pairs)) if pairs else None,
        "exact_gated_share": (sum(e > ANGLE_THRESHOLD for e in exact) / len(exact)) if exact else None,
        "angle_pairs": [[round(a, 2), round(e, 2)] for a, e in pairs],
        "exact_angles": [round(e, 2) for e in exact],
        "mean_exact_angle": statistics.fmean(exact) if exact else None,
    }


def loss_options(spec: dict) -> dict:
    """ACLEmbedLoss options of a run (besides its method's mode and gating)."""
    options = {}
    if spec["method"] != "ce":
        options.update(contrastive_weight=spec["contrastive_weight"], temperature=spec["temperature"])
    if spec["method"] == "acl_embed_grad":
        options.update(angle_threshold=ANGLE_THRESHOLD, angle_parameters="head_last_layer", angle_audit_every=AUDIT_EVERY)
    elif spec["method"] in ("supcon", "acl_embed", *ENCODED_LABELS):  # log the angle; threshold 180 never gates a finite angle
        options.update(gradient_gating=True, angle_threshold=180.0, angle_parameters="head_last_layer",
                       angle_every=LOG_ANGLE_EVERY, angle_audit_every=AUDIT_EVERY // LOG_ANGLE_EVERY)
    if spec["method"] in ENCODED_LABELS:
        options.update(label_embedding="encoded")
    options.update(spec.get("options", {}))
    return options


def cost_run(spec: dict, splits: dict, args) -> dict:
    """Seconds per optimizer step of each ``COST_VARIANTS`` loss, interleaved step by step on the same
    Banking77 batches (``COST_CLASSES_PER_BATCH`` classes x 2 rows, as the label-grouped sampler gives)."""
    import copy

    from sentence_transformers.util import batch_to_device

    from contrastive_bert.models import load_model
    from contrastive_bert.training.losses_registry import build_loss

    base = load_model("default", device=args.device)
    base.max_seq_length = MAX_SEQ_LENGTH["banking77"]
    setups = {}
    for variant, options in COST_VARIANTS.items():
        model = copy.deepcopy(base).train()
        loss = build_loss("acl", model, splits["train"], {"contrastive_weight": 0.5, "temperature": 0.1,
                                                          "angle_threshold": ANGLE_THRESHOLD, **options}, batch_size=BATCH_SIZE)
        setups[variant] = (model, loss, torch.optim.AdamW(model.parameters(), lr=1e-4))
    labels_all = np.asarray(splits["train"]["label"])
    rng = np.random.default_rng(0)
    rounds = min(COST_ROUNDS, args.max_steps or COST_ROUNDS)
    times: dict[str, list[float]] = {v: [] for v in setups}
    for r in range(rounds + COST_WARMUP):
        classes = rng.choice(np.unique(labels_all), size=COST_CLASSES_PER_BATCH, replace=False)
        index = [int(i) for k in classes for i in rng.choice(np.flatnonzero(labels_all == k), size=2, replace=False)]
        rows = splits["train"].select(index)
        features = batch_to_device(base.preprocess(list(rows["text"])), base.device)
        labels = torch.tensor(rows["label"], device=base.device)
        order = list(setups)[r % len(setups):] + list(setups)[: r % len(setups)]
        for variant in order:
            model, loss, optimizer = setups[variant]
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            parts = loss([dict(features)], labels)
            torch.stack(list(parts.values())).sum().backward()
            optimizer.step()
            if torch.cuda.is_available() and str(args.device).startswith("cuda"):
                torch.cuda.synchronize()
            if r >= COST_WARMUP:
                times[variant].append(time.perf_counter() - start)
    total_ce, ce = sum(times["ce"]), times["ce"]
    return {
        **spec, "key": run_key(spec), "rounds": rounds, "batch": 2 * COST_CLASSES_PER_BATCH, "steps": rounds,
        "train_seconds": sum(sum(t) for t in times.values()),
        "seconds_per_step": {v: statistics.fmean(t) for v, t in times.items()},
        "median_seconds_per_step": {v: statistics.median(t) for v, t in times.items()},
        "ratio_to_ce": {v: sum(t) / total_ce for v, t in times.items()},
        "median_ratio_to_ce": {v: statistics.median(a / b for a, b in zip(t, ce)) for v, t in times.items()},
        "step_seconds": {v: [round(x, 4) for x in t] for v, t in times.items()},
    }


def batch_sampler(order: str):
    """The trainer's ``batch_sampler`` of a batch order: sentence-transformers' ``group_by_label`` or the
    package's :class:`~contrastive_bert.losses.acl_embed.ClassMixedBatchSampler` (``class_mixed``)."""
    if order == "group_by_label":
        return "group_by_label"
    if order == "class_mixed":
        from contrastive_bert.losses.acl_embed import ClassMixedBatchSampler

        return ClassMixedBatchSampler
    raise ValueError(f"batch_order: expected group_by_label or class_mixed, got {order!r}")


def probe_scores(model, train, splits: dict, embeddings: dict, args, seed: int) -> dict:
    """Logistic regression on the trained model's own embeddings (train rows capped like the evaluation
    rows in a smoke test): what a linear probe of the same encoder reaches, next to its label head."""
    from contrastive_bert.evaluation.classification import classification_scores

    train = _subsample(train, args.eval_rows)
    encoded = model.encode(list(train["text"]), batch_size=128, show_progress_bar=False)
    scores = {}
    for split in ("dev", "test"):
        result = classification_scores(encoded, np.asarray(train["label"]), embeddings[split], np.asarray(splits[split]["label"]), seed=seed)
        scores[split] = {"accuracy": result["accuracy"], "macro_f1": result["f1_macro"]}
    return scores


def train_run(spec: dict, splits: dict, args) -> dict:
    """Train one model and score it on dev and test; returns the run-log record."""
    from contrastive_bert.heads.label_embedding import find_label_head
    from contrastive_bert.models import load_model
    from contrastive_bert.training.acl import acl_loss_for_method
    from contrastive_bert.training.recipe import TrainingRecipe
    from contrastive_bert.training.runner import fit
    from contrastive_bert.training.step_timer import StepTimer

    train = train_rows(splits, spec["regime"], spec["seed"])
    steps_per_epoch = max(1, len(train) // BATCH_SIZE)
    epochs = EPOCHS_FULL if spec["regime"] != "10-shot" else max(3, math.ceil(MIN_STEPS_FEW_SHOT / steps_per_epoch))
    order = spec.get("batch_order", BATCH_ORDER[spec["regime"]])
    caps = [n for n in (spec.get("max_steps"), args.max_steps) if n]
    max_steps = min(caps) if caps else -1
    torch.manual_seed(spec["seed"])
    model = load_model("default", device=args.device)
    recipe = TrainingRecipe(
        datasets=[spec["dataset"]], epochs=epochs, max_steps=max_steps, batch_size=BATCH_SIZE,
        learning_rate=spec["learning_rate"], head_learning_rate=spec.get("head_learning_rate", HEAD_LEARNING_RATE), seed=spec["seed"],
        max_seq_length=MAX_SEQ_LENGTH[spec["dataset"]], logging_steps=50, save_steps=10**6, eval_steps=10**6,
        dev_task=None, eval_tasks=[],
    )
    timer = StepTimer()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as output_dir:
        method = ENCODED_LABELS.get(spec["method"], spec["method"])
        # training.acl.train_label_classifier with the regime's batch order: the registry's acl loss, fit()
        loss = acl_loss_for_method(model, splits["names"], method, train, **loss_options(spec))
        trainer = fit(model, train, loss, recipe, output_dir, callbacks=[timer], batch_sampler=batch_sampler(order))
    seconds = time.perf_counter() - start
    head = find_label_head(model)
    record = {**spec, "key": run_key(spec), "train_rows": len(train), "epochs": epochs, "steps": trainer.state.global_step,
              "batch_order": order,
              "train_seconds": seconds - loss.audit_seconds, "audit_seconds": loss.audit_seconds,
              "step_seconds_median": statistics.median(timer.durations) if timer.durations else None,
              "single_class_batches": loss.single_class_batches, **angle_stats(loss.angle_history)}
    embedded = {}
    for split in ("dev", "test"):
        texts, gold = list(splits[split]["text"]), np.asarray(splits[split]["label"])
        with torch.no_grad():
            embeddings = model.encode(texts, batch_size=128, convert_to_tensor=True, show_progress_bar=False)
            predicted = head.logits(embeddings.to(head.weight.device).float()).argmax(dim=1).cpu().numpy()
        record[split] = _scores(gold, predicted)
        embedded[split] = embeddings.float().cpu().numpy()
    if spec["regime"] in PROBE_REGIMES:
        record["probe"] = probe_scores(model, train, splits, embedded, args, spec["seed"])
    record["general"] = general_ability(model, args.data_dir, max_rows=args.eval_rows)  # did the classifier cost the encoder?
    return record


def logreg_run(spec: dict, splits: dict, args) -> dict:
    """Logistic regression on frozen embeddings of the untrained model (MTEB protocol), per seed."""
    from contrastive_bert.evaluation.classification import classification_scores
    from contrastive_bert.models import load_model

    model = load_model("default", device=args.device)
    model.max_seq_length = MAX_SEQ_LENGTH[spec["dataset"]]
    train = train_rows(splits, spec["regime"], spec["seed"])
    if args.dry_run:  # a smoke test: as few training rows as evaluation rows
        train = _subsample(train, args.eval_rows)
    start = time.perf_counter()
    frozen = splits.setdefault("frozen", {})  # dev/test embeddings of the untrained model, shared by the seeds
    for split in ("dev", "test"):
        if split not in frozen:
            frozen[split] = model.encode(list(splits[split]["text"]), batch_size=128, show_progress_bar=False)
    encoded = {"train": model.encode(list(train["text"]), batch_size=128, show_progress_bar=False), **frozen}
    record = {**spec, "key": run_key(spec), "train_rows": len(train), "epochs": None, "steps": None}
    for split in ("dev", "test"):
        scores = classification_scores(encoded["train"], np.asarray(train["label"]), encoded[split], np.asarray(splits[split]["label"]), seed=spec["seed"])
        record[split] = {"accuracy": scores["accuracy"], "macro_f1": scores["f1_macro"]}
    record["train_seconds"] = time.perf_counter() - start
    return record


# --------------------------------------------------------------------------- plan (the shared protocol's grid)

LOGREG = "LogisticRegression(max_iter=1000) on frozen embeddings"
# every method's seed-0 choice first (a one-seed verdict early), then the seeds
ORDER = [("dev", "ce"), ("dev", "acl_embed"), ("dev", "supcon"), ("dev", "acl_embed_encoded"), ("final", "acl_embed_grad"),
         ("final", "ce"), ("final", "acl_embed"), ("final", "supcon"), ("final", "acl_embed_encoded")]
# full16k: the encoded method (the recipe's) first, then the other dev runs (the baselines before the free head:
# a one-seed verdict early), the old-order twin (one seed; the pick waits on every method's seed-0 run), then the
# seeds of the two rows the dev scores pick
ORDER_FULL16K = [("dev", "acl_embed_encoded"), ("dev", "ce"), ("dev", "supcon"), ("dev", "acl_embed"),
                 ("final", ORDER_DIAGNOSTIC), ("final", "ce"), ("final", "supcon"), ("final", "acl_embed"),
                 ("final", "acl_embed_encoded")]


def pick_full16k(scores: dict[str, float]) -> list[str]:
    """full16k's rows with seeds 1-2: the better of CE / CE + SupCon on dev and the better ACL row on dev
    (``scores``: each method's dev score at its chosen configuration, seed 0; first on ties)."""
    from contrastive_bert.benchmarking.protocol import choose_on_dev

    return [choose_on_dev({m: scores[m] for m in ("ce", "supcon")}),
            choose_on_dev({m: scores[m] for m in ("acl_embed", "acl_embed_encoded")})]


def methods_full16k() -> list[Method]:
    """emotion on all of train: every method at the sample's (lambda, tau), two rate settings each (an encoded
    head has no parameters: its two settings differ in the encoder's rate alone); the old-order twin of the
    encoded method at the sample's setting, one seed."""
    def at(name: str, rates) -> tuple[dict, ...]:
        weight, temperature = FULL16K_PAIRS[name]
        return tuple({**rate, "contrastive_weight": weight, "temperature": temperature} for rate in rates)

    encoder_rates = tuple({"learning_rate": rate["learning_rate"]} for rate in FULL16K_RATES)
    return [Method("logreg", seeds=(0,), fields={"classifier": LOGREG}),
            Method("ce", "acl", FULL16K_RATES),
            Method("supcon", "acl", at("supcon", FULL16K_RATES)),
            Method("acl_embed", "acl", at("acl_embed", FULL16K_RATES)),
            Method("acl_embed_encoded", "acl", at("acl_embed_encoded", encoder_rates)),
            Method(ORDER_DIAGNOSTIC, "acl", at("acl_embed_encoded", encoder_rates[:1]), options={"batch_order": "group_by_label"},
                   seeds=(0,), fields={"note": "acl_embed_encoded at the sample's setting in sentence-transformers' group_by_label "
                                               "batch order (the order before the fix), seed 0: the batch order's effect"})]


def methods(regime: str) -> list[Method]:
    """The rows of a regime: logistic regression on frozen embeddings (deterministic on the full train
    set: one seed), CE choosing the learning rate, SupCon and the ACL-Embed variants choosing
    (lambda, tau) at CE's rate, ACL-Grad at ACL-Embed's choice (its other seeds only if it gates);
    ``full16k``: :func:`methods_full16k`."""
    if regime == "full16k":
        return methods_full16k()
    pairs = tuple({"contrastive_weight": w, "temperature": t} for w, t in CONTRASTIVE[regime])
    return [Method("logreg", seeds=(0,) if regime == "full" else None, fields={"classifier": LOGREG}),
            Method("ce", "acl", tuple({"learning_rate": lr} for lr in LEARNING_RATES[regime])),
            *(Method(name, "acl", pairs, builds_on="ce") for name in ("supcon", "acl_embed", "acl_embed_encoded")),
            Method("acl_embed_grad", "acl", builds_on="acl_embed",
                   more_seeds_if=lambda first: (first.get("gated_share") or 0.0) > GRAD_SEEDS_IF_GATED_OVER)]


@functools.cache
def grid(regime: str) -> Grid:
    """The regime's grid over the data sets; a run's key is its spec's (as logged before the shared protocol)."""
    return Grid(methods(regime), REGIME_DATASETS[regime], REGIME_SEEDS[regime], key=lambda run: run_key(spec_of(run, regime)),
                dev_score=lambda record: record["dev"]["accuracy"],
                select={"emotion": pick_full16k} if regime == "full16k" else {})


def spec_of(run: Run, regime: str) -> dict:
    """What a run trains: data set, regime, method, seed and its options (the head of its run-log record)."""
    method = grid(regime).method(run.method)
    return {"dataset": run.setting, "regime": regime, "method": run.method, "seed": run.seed,
            **dict(run.inherited), **method.config(run.config)}


def plan_block(dataset: str, regime: str, runs: dict[str, dict]) -> Iterator[dict]:
    """The runs of one block in ``ORDER`` (a method whose choice is not made yet: its dev runs)."""
    if dataset == "cost":
        yield {"dataset": "banking77", "regime": "cost", "method": "interleaved", "seed": 0}
        return
    g = grid(regime)
    todo = g.final_runs(runs, dataset, g.method("logreg"), 0)
    for phase, name in (ORDER_FULL16K if regime == "full16k" else ORDER):
        method = g.method(name)
        config = g.chosen(runs, dataset, method)
        todo += g.dev_runs(dataset, method, runs) if phase == "dev" or config is None else g.final_runs(runs, dataset, method, config)
    for run in dict.fromkeys(todo):
        yield spec_of(run, regime)


def next_run(blocks: list[tuple[str, str]], runs: dict[str, dict]) -> dict | None:
    for dataset, regime in blocks:
        for spec in plan_block(dataset, regime, runs):
            if run_key(spec) not in runs:
                return spec
    return None


# --------------------------------------------------------------------------- summary


def _cost(records: list[dict]) -> dict:
    step_times = [r["step_seconds_median"] for r in records if r.get("step_seconds_median") is not None]
    return {"epochs": records[0]["epochs"], "step_seconds_median": statistics.fmean(step_times) if step_times else None}


def _angles(records: list[dict]) -> dict:
    """ACL-Grad's gate and the logged angles, averaged over the seeds."""
    values = {name: [r[name] for r in records if r.get(name) is not None]
              for name in ("gated_share", "mean_angle", "agreement_with_exact", "mean_exact_angle")}
    return {name: statistics.fmean(v) if v else None for name, v in values.items()}


def _probe(records: list[dict]) -> dict:
    """The linear probe of each run's own embeddings (runs that scored one): its test accuracy and the label
    head's minus it, mean/std over the seeds; nothing for runs without a probe."""
    pairs = [(r["test"]["accuracy"], r["probe"]["test"]["accuracy"]) for r in records if r.get("probe")]
    if not pairs:
        return {}
    return {"probe_test_accuracy": mean_std([p for _, p in pairs]), "head_minus_probe": mean_std([h - p for h, p in pairs]),
            "probe_dev_accuracy": next(r["probe"]["dev"]["accuracy"] for r in records if r.get("probe"))}


def _fields(records: list[dict]) -> dict:
    return {**_angles(records), **_probe(records)}


def entries(runs: dict[str, dict], dataset: str, regime: str) -> dict:
    """``method -> entry`` (the shared result shape) of one data set and regime."""
    g = grid(regime)
    scoring = {"test": lambda r: {m: r["test"][m] for m in ("accuracy", "macro_f1")}, "dev": lambda r: r["dev"],
               "general": lambda records: summarize_general([r.get("general") for r in records]), "cost": _cost, "fields": _fields}
    return {m.name: e for m in g.methods if (e := g.entry(runs, dataset, m, **scoring)) is not None}


def build_summary(log: list[dict], args) -> tuple[dict, dict]:
    """``{"settings": {"DATASET/REGIME": {method: entry}}, "comparisons": {"DATASET/REGIME": verdict}}``
    from the run log (partial results allowed), and the protocol and ACL-Grad's cost (written next to it)."""
    log = [r for r in log if not r.get("dry_run")]  # dry runs: numbers meaningless
    runs = {r["key"]: r for r in log}
    settings = {f"{d}/{r}": block for d in DATASETS for r in REGIMES if d in REGIME_DATASETS[r] and (block := entries(runs, d, r))}
    summary = {"settings": settings, "comparisons": {s: verdict(block, s.split("/")[1]) for s, block in settings.items()}}
    for setting, comparison in summary["comparisons"].items():
        if setting.endswith("/full16k"):  # the rows the dev scores pick for seeds 1-2 (None until every choice is made)
            comparison["picked_for_seeds"] = grid("full16k").selected(runs, setting.split("/")[0])
            if comparison["picked_for_seeds"] is None and not comparison["pending"]:  # every dev run in: the twin holds the pick
                comparison["pending"] = {ORDER_DIAGNOSTIC: "not run (the pick of the rows for seeds 1-2 waits on it)"}
                comparison["pending_why"] = PENDING_WHY
            comparison["batch_order_effect"] = batch_order_effect(runs, setting.split("/")[0])
    cost = [r for r in log if r["regime"] == "cost"]
    protocol = {
        "acl_grad_cost": _cost_summary(cost),
        "protocol": {
            "model": "default (all-MiniLM-L6-v2) + label-embedding head (cosine logits x 20)",
            "validation": ("emotion/SST-2: their validation split; Banking77: 10% of train held out (seed 0), models train on the "
                           "other 90%: unstratified for the runs logged before issue 19, the package's stratified dev-split "
                           "rule (load_dataset) since"),
            "train_samples": {k: v if v is not None else "all" for k, v in TRAIN_SAMPLES.items()},
            "train_samples_note": "emotion and SST-2 train on a fixed 3,000-row sample of train (seed 0) to fit ~8 h of 2 CPU cores; epochs are not shrunk",
            "epochs": {"full": EPOCHS_FULL, "10-shot": f"max(3, ceil({MIN_STEPS_FEW_SHOT} / steps per epoch))"},
            "batch_size": BATCH_SIZE, "head_learning_rate": HEAD_LEARNING_RATE, "max_seq_length": MAX_SEQ_LENGTH,
            "learning_rates": LEARNING_RATES, "lambda_tau": CONTRASTIVE, "seeds": SEEDS, "shots": SHOTS,
            "selection": ("CE picks the learning rate on dev; SupCon, ACL-Embed and ACL-Embed with encoded label names pick "
                          "(lambda, tau) at that rate; ACL-Embed + ACL-Grad reuses ACL-Embed's choice"),
            "acl_grad_seeds": (f"one run (seed 0) at ACL-Embed's choice; the other seeds only if it gates more than "
                               f"{GRAD_SEEDS_IF_GATED_OVER:.0%} of its steps (runs logged before this rule ran every seed)"),
            "encoded_labels": "acl_embed_encoded: ACLEmbedLoss(label_embedding='encoded'), the label rows are the encoder's embeddings of the bare label names",
            "acl_grad": f"angle over the head + last encoder layer every step, threshold {ANGLE_THRESHOLD}; exact angle (all parameters) audited every {AUDIT_EVERY} steps",
            "agreement_with_exact": f"share of audited steps where (cheap angle > {ANGLE_THRESHOLD}) == (exact angle > {ANGLE_THRESHOLD})",
            "angles_of_ungated_methods": f"SupCon and ACL-Embed: the same estimate every {LOG_ANGLE_EVERY} steps at threshold 180 (never gates), the exact angle every {AUDIT_EVERY} steps; CE has no contrastive term",
            "train_seconds": "wall-clock training time minus audit time, on a shared 2-core machine (noisy; see acl_grad_cost)",
            "setfit": "not run: over the 8 h budget",
            "max_steps_cap": args.max_steps, "eval_rows_cap": args.eval_rows,
        },
    }
    if any(r["regime"] == "full16k" for r in log):  # described once it has runs (the files stay as they were before)
        protocol["protocol"]["full16k"] = {
            "train_rows": "all of emotion's train (16,000 rows)", "epochs": EPOCHS_FULL, "seeds": REGIME_SEEDS["full16k"],
            "lambda_tau": {m: list(pair) for m, pair in FULL16K_PAIRS.items()},
            "rates_on_dev": [dict(rate) for rate in FULL16K_RATES],
            "encoded_head_rate": "an encoded head has no parameters (its rows are a buffer re-encoded by the encoder): only the encoder's rate varies",
            "selection": "each method picks its rates on dev (seed 0); seeds 1-2 for the better of CE / CE + SupCon on dev and the better ACL row on dev",
            "batch_order": "the package's acl order (ClassMixedBatchSampler); the full and 10-shot regimes used group_by_label",
            "order_diagnostic": f"{ORDER_DIAGNOSTIC}: acl_embed_encoded at the sample's setting in the group_by_label order, seed 0",
            "probe": "every run: logistic regression on its own trained embeddings of train, scored on dev and test",
        }
    return summary, protocol


def batch_order_effect(runs: dict[str, dict], dataset: str) -> dict | None:
    """full16k: the encoded method at the sample's setting (encoder 2e-4, lambda 0.5, tau 0.1), seed 0, in the
    package's class-mixed order minus the same run in the group_by_label order (one seed: indicative)."""
    g = grid("full16k")
    twin = g.method(ORDER_DIAGNOSTIC)
    specs = {"class_mixed": {"dataset": dataset, "regime": "full16k", "method": "acl_embed_encoded", "seed": 0,
                             **g.method("acl_embed_encoded").config(0)},
             "group_by_label": {"dataset": dataset, "regime": "full16k", "method": ORDER_DIAGNOSTIC, "seed": 0, **twin.config(0)}}
    records = {order: runs.get(run_key(spec)) for order, spec in specs.items()}
    if any(r is None for r in records.values()):
        return None
    scores = {order: {"dev": r["dev"]["accuracy"], "test": r["test"]["accuracy"], "test_macro_f1": r["test"]["macro_f1"],
                      **({"probe_test": r["probe"]["test"]["accuracy"]} if r.get("probe") else {})} for order, r in records.items()}
    return {"options": {k: v for k, v in specs["group_by_label"].items() if k not in ("dataset", "regime", "method", "seed", "batch_order")},
            "seed": 0, **scores,
            "test_difference": scores["class_mixed"]["test"] - scores["group_by_label"]["test"],
            "dev_difference": scores["class_mixed"]["dev"] - scores["group_by_label"]["dev"]}


ACL_VARIANTS = ("acl_embed", "acl_embed_encoded", "acl_embed_grad")
PENDING_WHY = ("not reached yet in the CPU time so far (one process on 2 cores, blocks in BLOCKS order); "
               "`python eval/bench_acl.py --data-dir ../shared/data` resumes from the run log, or the offline "
               "GPU bundle's acl_quality block runs it")


def trained_methods(regime: str) -> list[str]:
    """The trained methods a regime's verdict weighs (in ``TRAINED_METHODS`` order; not the order diagnostic)."""
    return [m for m in TRAINED_METHODS if m in grid(regime).by_name]


def verdict(entry: dict, regime: str) -> dict:
    """Which trained method is best on test (each tuned on dev, all of the regime's seeds run), which one
    dev alone would pick (``best_on_dev``), its paired margins over CE and SupCon, and the best ACL
    variant against SupCon; ``pending`` names the
    methods whose seeds are not all in yet (a verdict with pending methods is provisional)."""
    trained, seeds = trained_methods(regime), REGIME_SEEDS[regime]
    complete = {m: e for m, e in entry.items() if m in trained and len(e.get("seeds", [])) == len(seeds)}
    pending = {m: f"{len(e.get('seeds', []))} of {len(e.get('seeds_planned', seeds))} seeds"
               for m, e in entry.items() if m in trained and m not in complete and e.get("seeds") != e.get("seeds_planned")}
    # a method whose seeds wait on a pick (full16k) is pending while its own dev runs are not all in
    pending.update({m: f"{tried} of {planned} configurations on dev" for m, e in entry.items()
                    if m in trained and m not in complete and m not in pending
                    and (tried := e.get("chosen_on_dev", {}).get("configs_tried", 0)) < (planned := e.get("chosen_on_dev", {}).get("configs_planned", 0))})
    pending.update({m: "not run" for m in trained if m not in entry})
    result: dict = {"methods_complete": sorted(complete), "pending": pending, "seeds": seeds}
    if pending:
        result["pending_why"] = PENDING_WHY
    if not complete:
        return result
    best = max(complete, key=lambda m: complete[m]["test"]["accuracy"]["mean"])
    result.update(best=best, best_test_accuracy=complete[best]["test"]["accuracy"])
    # what a user without the test set would pick: the highest dev accuracy (seed 0, chosen configuration)
    on_dev = {m: e["dev"]["accuracy"] for m, e in complete.items() if (e.get("dev") or {}).get("accuracy") is not None}
    if on_dev:
        result["best_on_dev"] = max(on_dev, key=on_dev.get)
        result["dev_accuracy"] = on_dev
    for baseline in ("ce", "supcon"):
        if baseline in complete and baseline != best:
            result[f"best_vs_{baseline}"] = paired_difference(complete[best], complete[baseline], "accuracy")
    acl = [m for m in ACL_VARIANTS if m in complete]
    if acl:
        best_acl = max(acl, key=lambda m: complete[m]["test"]["accuracy"]["mean"])
        result["best_acl"] = best_acl
        for baseline in ("ce", "supcon"):
            if baseline in complete:
                result[f"best_acl_vs_{baseline}"] = paired_difference(complete[best_acl], complete[baseline], "accuracy")
    return result


def _cost_summary(cost: list[dict]) -> dict:
    """The interleaved timing run's seconds per step and ratios to CE."""
    runs = [r for r in cost if r.get("seconds_per_step")]
    if not runs:
        return {}
    keys = ("rounds", "batch", "seconds_per_step", "median_seconds_per_step", "ratio_to_ce", "median_ratio_to_ce")
    return {**{k: runs[-1][k] for k in keys}, "note": (
        "every variant takes one optimizer step (forward, backward, AdamW) on the same batch in turn, round after "
        "round, so a loaded machine slows all alike; ratio_to_ce = total time / CE's total time")}


def plot_angles(log: list[dict], path: Path) -> None:
    """Histograms of the CE-vs-contrastive gradient angle per method (exact and cheap estimate), one series per
    data set (emotion on all of train apart from its sample)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = ("supcon", "acl_embed", "acl_embed_grad")
    fig, axes = plt.subplots(1, len(methods), figsize=(15, 4), sharey=False)
    for method, ax in zip(methods, axes):
        # emotion on all 16,000 rows is its own series (the sample's and 10-shot runs share one per data set)
        series = [(d, lambda r, d=d: r["dataset"] == d and r["regime"] not in ("cost", "full16k")) for d in DATASETS]
        series.append(("emotion, all 16,000 rows", lambda r: r["dataset"] == "emotion" and r["regime"] == "full16k"))
        for dataset, chosen in series:
            runs = [r for r in log if r["method"] == method and chosen(r)]
            exact = [a for r in runs for a in r.get("exact_angles", [])]
            cheap = [a for r in runs for a in r.get("angles", [])]
            if exact:
                ax.hist(exact, bins=30, range=(0, 180), alpha=0.5, label=f"{dataset} exact (n={len(exact)})")
            if cheap and method == "acl_embed_grad":
                ax.hist(cheap, bins=30, range=(0, 180), histtype="step", label=f"{dataset} head+last layer (n={len(cheap)})")
        ax.axvline(ANGLE_THRESHOLD, color="k", ls="--", lw=1)
        ax.set_title(f"angle(grad CE, grad contrastive): {method}")
        ax.set_xlabel("degrees")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def label_name_geometry(data_dir: str | None, device: str | None = None) -> dict:
    """How close each data set's label names lie under the untrained model: per data set the number of
    classes, the mean cosine between two names and the mean (and max) cosine of each name to its
    nearest other name. Crowded names (Banking77) make crowded anchors for the encoded label head."""
    from contrastive_bert.data import load_dataset
    from contrastive_bert.models import load_model

    model = load_model("default", device=device)
    geometry = {}
    for name in DATASETS:
        try:
            names = list(load_dataset(name, data_dir=data_dir)["train"].features["label"].names)
        except (ValueError, FileNotFoundError) as error:  # a bundle may carry only some data sets
            geometry[name] = {"error": str(error).splitlines()[0]}
            continue
        vectors = model.encode(names, convert_to_tensor=True, normalize_embeddings=True, show_progress_bar=False)
        cosine = (vectors @ vectors.T).float()
        off_diagonal = ~torch.eye(len(names), dtype=torch.bool, device=cosine.device)
        nearest = cosine.masked_fill(~off_diagonal, -1.0).max(dim=1).values
        geometry[name] = {"classes": len(names), "mean_cosine": round(float(cosine[off_diagonal].mean()), 4),
                          "mean_nearest_cosine": round(float(nearest.mean()), 4), "max_nearest_cosine": round(float(nearest.max()), 4)}
    return geometry


def write_summary(log: list[dict], args) -> None:
    output = Path(args.output)
    summary, protocol = build_summary(log, args)
    protocol["label_names"] = {"what": "cosine of the bare label names under the untrained default model (the encoded head's starting anchors)",
                               **label_name_geometry(args.data_dir, args.device)}
    write_results(output, summary, device=args.device, indent=1)
    write_results(output.with_name(f"{output.stem}_protocol.json"), protocol, device=args.device, indent=1)
    if any(r.get("exact_angles") for r in log):
        plot_angles(log, output.with_name("acl_grad_angle_hist.png"))


def main(argv=None) -> int:
    args = parse_args(argv)
    budget = setup_from_args(args)
    blocks = [tuple(b.split(":")) for b in args.only] if args.only is not None else list(BLOCKS)
    run_log = RunLog(args.run_log)
    if args.summary_only:
        write_summary(run_log.records(), args)
        return 0
    if args.plan:
        runs = run_log.of_mode(args.dry_run)
        for dataset, regime in blocks:
            for spec in plan_block(dataset, regime, runs):
                if run_key(spec) not in runs:
                    print(json.dumps(spec))
        return 0
    splits_cache: dict[tuple[str, int | None], dict] = {}  # (data set, training rows sampled) -> splits
    done = 0
    while args.max_runs is None or done < args.max_runs:
        runs = run_log.of_mode(args.dry_run)
        spec = next_run(blocks, runs)
        if spec is None:
            logger.info("all planned runs are done")
            break
        kind = f"{spec['dataset']}:{spec['regime']}"
        if not budget.allows(kind):
            break
        cache_key = (spec["dataset"], train_samples(spec["dataset"], spec["regime"]))
        if cache_key not in splits_cache:
            splits_cache[cache_key] = load_splits(spec["dataset"], args.data_dir, args.eval_rows, regime=spec["regime"])
        logger.info("run %s", run_key(spec))
        runner = {"logreg": logreg_run, "interleaved": cost_run}.get(spec["method"], train_run)
        with budget.timed(kind):
            record = runner(spec, splits_cache[cache_key], args)
        record.update(max_steps_cap=args.max_steps, eval_rows_cap=args.eval_rows, dry_run=args.dry_run)
        record = run_log.append(record.pop("key"), json_safe(record))  # nan -> null
        done += 1
        logger.info("done: dev %s test %s (%.0f s)", record.get("dev"), record.get("test"), record.get("train_seconds") or 0)
        write_summary(run_log.records(), args)
    write_summary(run_log.records(), args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
