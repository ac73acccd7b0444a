"""Retrieval on a domain the model has not seen: which loss and which negatives adapt the bundled
all-MiniLM-L6-v2 best to SciFact and NFCorpus?

The protocol (the same for every method):

* base model: the bundled all-MiniLM-L6-v2; queries and documents up to 256 tokens (queries are
  tokenised apart from documents, so short queries are not padded to document length); batch 32
  (the cached losses: 128 in mini-batches of 32); warm-up 10%; 3 epochs over the training pairs;
* training pairs: (query, relevant document) from the train qrels, at most 4 per query, the
  most relevant first (:func:`contrastive_bert.data.training_pairs.retrieval_pairs`); SciFact's
  dev split is the package's dev-split rule (10% of the train queries, never trained on);
* evaluation: the MTEB protocol, exact cosine search over the whole corpus, nDCG@10 (main),
  MAP@100, MRR@10, Recall@100 on dev and test; plus the general-ability block
  (:mod:`contrastive_bert.inference.general_ability`: STS-B and zero-shot Banking77, emotion and
  SST-2) for every trained model;
* tuning: each method's own settings chosen on **dev only**, at most 3 configurations with
  seed 0 (the learning rate grid 2e-5 / 5e-5 for every method plus one setting of its own), then
  the chosen configuration with seeds 1 and 2; test mean and std over the 3 seeds.

Methods: sentence-transformers' MNRL (in-batch), MNRL with ``hardness_mode``, CachedMNRL at batch
128, GISTEmbed (guide: the frozen bundled model), MNRL on triplets from
``sentence_transformers.util.mine_hard_negatives`` at its documented recommendation (TopK-PercPos
95%, top sampling); ours: the queue alone, the queue with in-training hard negatives, the corpus
miner that never mines a judged-relevant document (``contrastive_bert.corpus_mining``) under
MNRL and under the queue, and the cached queue at batch 128.

Resumable: each finished run is appended to ``retrieval_quality_runs.jsonl`` and skipped on
restart; ``retrieval_quality.json`` (+ ``retrieval_quality.png``) is rebuilt after every run, so
partial results are valid. Runs go in plan order: seed 0 of every method's first configuration,
then the other configurations, then the seeds of the dev-chosen ones, SciFact before NFCorpus.

    OMP_NUM_THREADS=2 nohup .venv/bin/python eval/bench_retrieval.py --threads 2 > retrieval.log 2>&1 &
    .venv/bin/python eval/bench_retrieval.py --device cuda --max-minutes 9
"""

from __future__ import annotations

import argparse
import logging
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from contrastive_bert.benchmarking import (
    DRY_RUN_STEPS,
    RunLog,
    add_common_arguments,
    mean_std,
    selected,
    setup_from_args,
    write_results,
)
from contrastive_bert.data import load_dataset
from contrastive_bert.data.beir import RetrievalData
from contrastive_bert.data.training_pairs import retrieval_pairs
from contrastive_bert.evaluation.beir_evaluation import evaluate_retrieval_splits
from contrastive_bert.inference.general_ability import general_ability
from contrastive_bert.models import load_model
from contrastive_bert.training import TrainingRecipe, fit, get_loss_entry

logger = logging.getLogger("bench_retrieval")
RESULTS = Path(__file__).resolve().parent / "results"
EPOCHS = 3
BATCH_SIZE = 32
CACHED_BATCH_SIZE = 128
MAX_SEQ_LENGTH = 256
MAX_POSITIVES_PER_QUERY = 4
SETTINGS = ("scifact", "nfcorpus")
LR = (2e-5, 5e-5)


@dataclass(frozen=True)
class Method:
    """One row of the table: a registered loss, its training rows and its dev-tuned configurations.

    ``rows``: ``pairs`` (query, relevant document), ``st_mined`` (+ one negative from
    sentence-transformers' miner) or ``corpus_mined`` (+ one negative from ours)."""

    loss: str
    baseline: bool
    configs: tuple[dict[str, Any], ...]  # loss options plus "learning_rate"
    rows: str = "pairs"
    batch_size: int = BATCH_SIZE
    note: str = ""


def _configs(own: dict[str, Any], extra: dict[str, Any] | None = None) -> tuple[dict[str, Any], ...]:
    """The shared learning-rate grid at the method's own defaults, plus one setting of its own."""
    configs = [{**own, "learning_rate": LR[0]}, {**own, "learning_rate": LR[1]}]
    if extra is not None:
        configs.append({**own, **extra, "learning_rate": LR[0]})
    return tuple(configs)


HARD = {"num_hard_negatives": 8, "hard_negative_share": 0.15}
METHODS: dict[str, Method] = {
    "mnrl": Method("mnrl", True, _configs({"scale": 20.0}, {"scale": 50.0}), note="MultipleNegativesRankingLoss, in-batch negatives"),
    "mnrl_st_mined": Method("mnrl", True, _configs({"scale": 20.0}, {"scale": 50.0}), rows="st_mined",
                            note="MNRL on sentence-transformers' mine_hard_negatives triplets (TopK-PercPos 95%, top)"),
    "queue_corpus_mined": Method("queue_infonce", False, _configs({"temperature": 0.05}, {"temperature": 0.02}), rows="corpus_mined",
                                 note="queue InfoNCE on our corpus-mined triplets (judged-relevant documents never negatives)"),
    "mnrl_corpus_mined": Method("mnrl", False, _configs({"scale": 20.0}, {"scale": 50.0}), rows="corpus_mined",
                                note="ablation: MNRL on our corpus-mined triplets (the miner without the queue)"),
    "queue_hard": Method("queue_infonce", False, _configs({"temperature": 0.05, **HARD}, {"temperature": 0.02}),
                         note="queue InfoNCE + 8 in-training hard negatives from the queue"),
    "gist": Method("gist", True, _configs({"temperature": 0.01}, {"temperature": 0.05}), note="GISTEmbedLoss, guide: the frozen bundled model"),
    "queue": Method("queue_infonce", False, _configs({"temperature": 0.05}, {"temperature": 0.02}), note="queue InfoNCE, queue only (ablation)"),
    "mnrl_hardness": Method("mnrl", True, _configs({"scale": 20.0, "hardness_mode": "in_batch_negatives", "hardness_strength": 5.0},
                                                   {"hardness_strength": 10.0}), note="MNRL with hardness_mode (in-batch)"),
    "cached_mnrl": Method("cached_mnrl", True, _configs({"scale": 20.0, "mini_batch_size": 32}, {"scale": 50.0}),
                          batch_size=CACHED_BATCH_SIZE, note="CachedMNRL (GradCache), batch 128"),
    "cached_queue": Method("cached_queue_infonce", False, _configs({"temperature": 0.05, "mini_batch_size": 32}, {"temperature": 0.02}),
                           batch_size=CACHED_BATCH_SIZE, note="cached queue InfoNCE, batch 128"),
}


def run_key(setting: str, method: str, config: int, seed: int) -> str:
    return f"{setting}/{method}/{config}/{seed}"


@dataclass
class Context:
    """What every run of a setting shares: the data, cached training rows, the general block of
    the untrained model."""

    args: argparse.Namespace
    data: dict[str, RetrievalData] = field(default_factory=dict)
    rows: dict[tuple[str, str], Any] = field(default_factory=dict)

    def retrieval(self, setting: str) -> RetrievalData:
        if setting not in self.data:
            self.data[setting] = RetrievalData.from_splits(load_dataset(setting, data_dir=self.args.data_dir))
        return self.data[setting]

    def train_rows(self, setting: str, kind: str):
        """The training rows (the same for every seed; the trainer shuffles them by its seed)."""
        key = (setting, kind)
        if key not in self.rows:
            data = self.retrieval(setting)
            if kind == "pairs":
                rows = retrieval_pairs(data, "train", MAX_POSITIVES_PER_QUERY)
            elif kind == "st_mined":
                rows = _st_mined(data, self.args.device)
            elif kind == "corpus_mined":
                from contrastive_bert.corpus_mining import mine_corpus_negatives

                miner = _base_model(self.args.device)
                rows = mine_corpus_negatives(miner, data, "train", num_negatives=1, range_max=100, perc_pos=0.95,
                                             sampling="top", max_positives_per_query=MAX_POSITIVES_PER_QUERY, batch_size=64)
            else:
                raise ValueError(f"rows: unknown training rows {kind!r}")
            self.rows[key] = rows
        return self.rows[key]


def _base_model(device: str):
    model = load_model("default", device=device)
    positions = getattr(getattr(model[0], "auto_model", None), "config", None)
    limit = getattr(positions, "max_position_embeddings", MAX_SEQ_LENGTH)
    model.max_seq_length = min(MAX_SEQ_LENGTH, limit)  # a small test model (dry runs) has fewer positions
    return model


def _st_mined(data: RetrievalData, device: str):
    """sentence-transformers' miner at its documented recommendation (NV-Retriever's TopK-PercPos
    95%: relative_margin 0.05, top sampling), one negative per pair, over the whole corpus."""
    from sentence_transformers.util import mine_hard_negatives

    from contrastive_bert.mining import faiss_available

    pairs = retrieval_pairs(data, "train", MAX_POSITIVES_PER_QUERY)
    return mine_hard_negatives(pairs, _base_model(device), anchor_column_name="anchor", positive_column_name="positive",
                               corpus=list(data.corpus.values()), relative_margin=0.05, num_negatives=1, sampling_strategy="top",
                               batch_size=64, use_faiss=faiss_available(), output_format="triplet", verbose=False)


def score(model, setting: str, ctx: Context) -> dict[str, Any]:
    """Dev and test retrieval metrics (one corpus encoding) and the general-ability block."""
    args = ctx.args
    eval_rows = DRY_RUN_STEPS * 8 if args.dry_run else None
    data = ctx.retrieval(setting)
    metrics = evaluate_retrieval_splits(model, data, ("validation", "test"), max_queries=eval_rows, batch_size=64)
    keep = ("ndcg_at_10", "map_at_100", "mrr_at_10", "recall_at_100")
    return {
        "dev": {m: metrics["validation"][m] for m in keep},
        "test": {m: metrics["test"][m] for m in keep},
        "general": general_ability(model, args.data_dir, max_rows=eval_rows),
    }


def run_one(setting: str, name: str, config_index: int, seed: int, ctx: Context) -> dict:
    args = ctx.args
    method = METHODS[name]
    config = dict(method.configs[config_index])
    learning_rate = config.pop("learning_rate")
    rows = ctx.train_rows(setting, method.rows)
    torch.manual_seed(seed)
    model = _base_model(args.device)
    recipe = TrainingRecipe(
        datasets=[setting], loss=method.loss, loss_options=dict(config), epochs=EPOCHS,
        max_steps=DRY_RUN_STEPS if args.dry_run else -1, batch_size=method.batch_size, learning_rate=learning_rate,
        max_seq_length=model.max_seq_length, seed=seed, save_steps=10**6, eval_steps=10**6, logging_steps=10,
        data_dir=args.data_dir, dev_task=None, eval_tasks=[],
    )
    entry = get_loss_entry(method.loss)
    loss = entry.build(model, rows, recipe)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = fit(model, rows, loss, recipe, output_dir, batch_sampler=entry.batch_sampler)
    seconds = time.perf_counter() - start
    if trainer.state.global_step == 0:
        raise RuntimeError(f"{setting}/{name}: no training step was taken (batch size {method.batch_size}, {len(rows)} rows)")
    losses = [item["loss"] for item in trainer.state.log_history if "loss" in item]
    if losses and not all(math.isfinite(v) for v in losses):
        raise RuntimeError(f"{setting}/{name}: non-finite training loss")
    return {
        "setting": setting, "method": name, "config": config_index, "seed": seed, "learning_rate": learning_rate,
        "options": config, "steps": trainer.state.global_step, "train_rows": len(rows), "train_seconds": seconds,
        "last_loss": losses[-1] if losses else None, "dry_run": bool(args.dry_run), **score(model, setting, ctx),
    }


def _untrained(setting: str, ctx: Context) -> dict:
    record = score(_base_model(ctx.args.device), setting, ctx)
    return {"setting": setting, "method": "untrained", "dry_run": bool(ctx.args.dry_run), **record}


def _mean_std_of(records: list[dict], *path: str) -> dict:
    values = []
    for record in records:
        value = record
        for part in path:
            value = value[part]
        values.append(value)
    return mean_std(values)


def summarize(records: list[dict], seeds: list[int]) -> dict:
    """``retrieval_quality.json``: per setting the untrained scores and, per method with runs, the
    dev-chosen configuration and its test mean/std over the seeds finished so far."""
    out: dict[str, Any] = {}
    for setting in SETTINGS:
        mine = [r for r in records if r["setting"] == setting and not r.get("dry_run")]
        untrained = next((r for r in mine if r["method"] == "untrained"), None)
        if untrained is None:
            continue
        methods = {}
        for name, method in METHODS.items():
            runs = [r for r in mine if r["method"] == name]
            tuning = {r["config"]: r for r in runs if r["seed"] == seeds[0]}
            if not tuning:
                continue
            chosen = max(tuning, key=lambda c: tuning[c]["dev"]["ndcg_at_10"])
            finished = sorted((r for r in runs if r["config"] == chosen), key=lambda r: r["seed"])
            options = dict(method.configs[chosen])
            methods[name] = {
                "baseline": method.baseline, "loss": method.loss, "rows": method.rows, "note": method.note, "options": options,
                "chosen_on_dev": {"config": chosen, "configs_tried": len(tuning), "configs_planned": len(method.configs),
                                  "dev_ndcg_at_10_by_config": {str(c): tuning[c]["dev"]["ndcg_at_10"] for c in sorted(tuning)}},
                "dev": tuning[chosen]["dev"],
                "test": {m: _mean_std_of(finished, "test", m) for m in ("ndcg_at_10", "map_at_100", "mrr_at_10", "recall_at_100")},
                "seeds": [r["seed"] for r in finished],
                "steps": finished[0]["steps"], "epochs": EPOCHS, "batch_size": method.batch_size,
                "train_rows": finished[0]["train_rows"],
                "train_seconds": _mean_std_of(finished, "train_seconds"),
                "stsb": _mean_std_of(finished, "general", "stsb"),
                "zero_shot": {s: _mean_std_of(finished, "general", "zero_shot", s) for s in ("banking77", "emotion", "sst2")},
                "zero_shot_mean": _mean_std_of(finished, "general", "zero_shot_mean"),
            }
        planned = {name: len(m.configs) + len(seeds) - 1 for name, m in METHODS.items()}
        done = {name: sum(1 for r in mine if r["method"] == name) for name in METHODS}
        out[setting] = {
            "untrained": {"dev": untrained["dev"], "test": untrained["test"], **untrained["general"]},
            "methods": methods,
            "missing_runs": {name: planned[name] - done[name] for name in METHODS if done[name] < planned[name]},
        }
    return out


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = [s for s in SETTINGS if s in summary and summary[s]["methods"]]
    if not settings:
        return
    fig, axes = plt.subplots(1, len(settings), figsize=(7 * len(settings), 4.5), squeeze=False)
    for ax, setting in zip(axes[0], settings):
        block = summary[setting]
        names = list(block["methods"])
        means = [block["methods"][n]["test"]["ndcg_at_10"]["mean"] for n in names]
        stds = [block["methods"][n]["test"]["ndcg_at_10"]["std"] for n in names]
        colors = ["tab:gray" if block["methods"][n]["baseline"] else "tab:blue" for n in names]
        ax.barh(names, means, xerr=stds, color=colors)
        ax.axvline(block["untrained"]["test"]["ndcg_at_10"], color="k", linestyle="--", label="untrained")
        ax.set_xlim(min(means + [block["untrained"]["test"]["ndcg_at_10"]]) - 3, max(means) + 2)
        ax.set_xlabel("test nDCG@10 (mean ± std over seeds; grey: sentence-transformers)")
        ax.set_title(setting)
        ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plan(settings: list[str], methods: list[str], seeds: list[int], records: RunLog) -> list[tuple[str, str, int, int]]:
    """Runs in the order that answers the most first: per setting, every method's first
    configuration at the tuning seed, then the other configurations, then the other seeds of the
    configuration chosen on dev so far (re-planned after each run)."""
    order = []
    for setting in settings:
        for config in range(3):
            order += [(setting, m, config, seeds[0]) for m in methods if config < len(METHODS[m].configs)]
        for m in methods:
            tuning = {c: records.get(run_key(setting, m, c, seeds[0])) for c in range(len(METHODS[m].configs))}
            finished = {c: r for c, r in tuning.items() if r is not None}
            if len(finished) == len(METHODS[m].configs):
                chosen = max(finished, key=lambda c: finished[c]["dev"]["ndcg_at_10"])
                order += [(setting, m, chosen, s) for s in seeds[1:]]
    return [run for run in order if not records.done(run_key(*run))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, output=RESULTS / "retrieval_quality.json", run_log=RESULTS / "retrieval_quality_runs.jsonl",
                         seeds=[0, 1, 2], methods=list(METHODS))
    parser.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated settings (default: {','.join(SETTINGS)})")
    args = parser.parse_args(argv)
    budget = setup_from_args(args)
    settings = [s for s in args.settings.split(",") if s]
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        raise ValueError(f"--settings: unknown {unknown}; expected some of {list(SETTINGS)}")
    methods = selected(args, list(METHODS))
    log = RunLog(args.run_log)
    output = Path(args.output)

    def write_summary() -> None:
        summary = summarize(log.records(), args.seeds)
        write_results(output, {"protocol": {"epochs": EPOCHS, "batch_size": BATCH_SIZE, "cached_batch_size": CACHED_BATCH_SIZE,
                                            "max_seq_length": MAX_SEQ_LENGTH, "max_positives_per_query": MAX_POSITIVES_PER_QUERY,
                                            "learning_rates": list(LR), "seeds": args.seeds,
                                            "dev": "scifact: 10% of the train queries (the package's dev-split rule); nfcorpus: its dev split",
                                            "tuning": "at most 3 configurations per method on dev at the first seed; then the other seeds of the chosen one"},
                               "methods_planned": {n: {"loss": m.loss, "rows": m.rows, "baseline": m.baseline, "note": m.note,
                                                       "configs": list(m.configs)} for n, m in METHODS.items()},
                               **summary}, device=args.device)
        plot(summary, output.with_suffix(".png"))

    if args.summary_only:
        write_summary()
        return 0
    ctx = Context(args)
    for setting in settings:
        key = run_key(setting, "untrained", 0, 0)
        if not log.done(key) and budget.allows("untrained"):
            with budget.timed("untrained"):
                log.append(key, _untrained(setting, ctx))
            write_summary()
    while True:
        todo = plan(settings, methods, args.seeds, log)
        if not todo:
            break
        setting, name, config, seed = todo[0]
        if not budget.allows(name):
            logger.info("stopping: the wall-clock limit leaves too little for %s", name)
            break
        logger.info("run %s", run_key(setting, name, config, seed))
        with budget.timed(name):
            record = run_one(setting, name, config, seed, ctx)
        log.append(run_key(setting, name, config, seed), record)
        logger.info("%s: dev nDCG@10 %.2f, test %.2f (%.0f s)", run_key(setting, name, config, seed),
                    record["dev"]["ndcg_at_10"], record["test"]["ndcg_at_10"], record["train_seconds"])
        write_summary()
    write_summary()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
