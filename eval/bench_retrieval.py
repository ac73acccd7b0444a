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
partial results are valid. Mined training rows are kept on disk (``--rows-cache``) and mined once. The plan (configurations on dev at seed 0, the other seeds for the
decisive rows, NFCorpus CPU on SciFact's choices) is the shared protocol's
(:mod:`contrastive_bert.benchmarking.protocol`, :func:`grid`): runs go configuration by configuration
at seed 0, then the seeds of the dev-chosen ones, SciFact before NFCorpus (:func:`run_order`).

    OMP_NUM_THREADS=2 nohup .venv/bin/python eval/bench_retrieval.py --threads 2 > retrieval.log 2>&1 &
    .venv/bin/python eval/bench_retrieval.py --device cuda --max-minutes 9
"""

from __future__ import annotations

import argparse
import functools
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
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
from contrastive_bert.benchmarking.plan_loop import NOTHING_LEFT, run_plan  # noqa: F401 (NOTHING_LEFT: the loop's exit status)
from contrastive_bert.benchmarking.protocol import Grid, Method, Run, choose_on_dev, paired_difference
from contrastive_bert.training import retrieval_runs
from contrastive_bert.training.retrieval_runs import (
    CORPUS_MINER,
    MAX_SEQ_LENGTH,
    METRICS,
    RetrievalProtocol,
    TrainingRows,
)
from contrastive_bert.training import TrainingRecipe, fit, get_loss_entry
from contrastive_bert.training.corpus_refresh import CorpusNegativeRefresh
from contrastive_bert.training.queue_probe import QueueNegativeProbe

logger = logging.getLogger("bench_retrieval")
RESULTS = Path(__file__).resolve().parent / "results"
EPOCHS = 3
BATCH_SIZE = 32
CACHED_BATCH_SIZE = 128


Protocol = RetrievalProtocol
PROTOCOLS = {
    "scifact": Protocol("scifact", dev_queries=81, note="the grid: every method, its configurations on dev, seeds for the decisive rows"),
    "nfcorpus": Protocol("nfcorpus", dev_queries=324, note="the full protocol (the GPU bundle's block)"),
    "nfcorpus_cpu": Protocol("nfcorpus", epochs=1, max_positives=1, follows="scifact", dev_queries=324,
                             note="the CPU protocol: one positive per query (the most relevant), one epoch; MNRL, the best "
                                  "sentence-transformers method and the best two of ours on SciFact's dev (a per-epoch refresh "
                                  "never runs in one epoch, so those rows give way to the next), at SciFact's "
                                  "dev-chosen configurations, 3 seeds"),
}
SETTINGS = tuple(PROTOCOLS)
LR = (2e-5, 5e-5)


def method(name: str, loss: str, baseline: bool, configs: tuple[dict[str, Any], ...], rows: str = "pairs",
           batch_size: int = BATCH_SIZE, note: str = "", refresh: bool = False, ablations: tuple[str, ...] = ()) -> Method:
    """One row of the table: a registered loss, its training rows and its dev-tuned configurations
    (loss options plus ``learning_rate``). ``rows``: ``pairs`` (query, relevant document),
    ``st_mined`` (+ one negative from sentence-transformers' miner) or ``corpus_mined`` (+ one
    negative from ours); ``refresh``: re-mine the corpus negatives with the model being trained
    each epoch (ANCE); ``ablations``: the methods that are this one without its queue (or refresh)."""
    return Method(name, loss, configs, rows=rows, fields={"baseline": baseline, "batch_size": batch_size, "note": note,
                                                          "refresh": refresh, "ablations": ablations})


def _queue_configs(own: dict[str, Any], distinct: bool = False) -> tuple[dict[str, Any], ...]:
    """The queue rows, 8 hard negatives mined from the queue each step: (0) every queue row a
    negative and the hard ones weighted to the seed's 15% of all negatives, at 2e-5; then, as the
    seed's sample code does, in-batch negatives plus only the top-8 queue rows, each counted once
    (8 of 39 negatives on pairs, 8 of 71 on triplets), at both learning rates. (Unweighted hard
    negatives on top of the whole queue would be the plain queue: each row counts once either way.)
    ``distinct``: (3) configuration 1 with each document counted once, as its newest copy (the
    probe found a third of the hard negatives to be stale second copies)."""
    hard_only = {"use_queue_negatives": False, "hard_negative_share": None}
    configs = ({**own, "hard_negative_share": 0.15, "learning_rate": LR[0]},
               {**own, **hard_only, "learning_rate": LR[0]},
               {**own, **hard_only, "learning_rate": LR[1]})
    return configs + (({**own, **hard_only, "distinct_queue_rows": True, "learning_rate": LR[0]},) if distinct else ())


def _configs(own: dict[str, Any], extra: dict[str, Any] | None = None) -> tuple[dict[str, Any], ...]:
    """The shared learning-rate grid at the method's own defaults, plus one setting of its own."""
    configs = [{**own, "learning_rate": LR[0]}, {**own, "learning_rate": LR[1]}]
    if extra is not None:
        configs.append({**own, **extra, "learning_rate": LR[0]})
    return tuple(configs)


QUEUE = {"temperature": 0.05, "queue_size": 1024, "num_hard_negatives": 8}
ST_RANGE = {"range_max": 100, "relative_margin": 0.05, "sampling_strategy": "top"}
ST_DOCUMENTED = {"range_min": 10, "range_max": 50, "max_score": 0.8, "relative_margin": 0.05, "sampling_strategy": "random"}
METHODS: dict[str, Method] = {
    "mnrl": method("mnrl", "mnrl", True, _configs({"scale": 20.0}),
                   note="MultipleNegativesRankingLoss, in-batch negatives"),
    "mnrl_st_mined": method("mnrl_st_mined", "mnrl", True, _configs({"scale": 20.0, "miner": ST_RANGE}, {"miner": ST_DOCUMENTED}),
                            rows="st_mined",
                            note="MNRL on sentence-transformers' mine_hard_negatives triplets: the same candidate range as ours "
                                 "(range_max 100, relative_margin 0.05, top); third configuration: its documented example"),
    "mnrl_corpus_mined": method("mnrl_corpus_mined", "mnrl", False, _configs({"scale": 20.0}), rows="corpus_mined",
                                note="ablation: MNRL on our corpus-mined triplets (the miner without the queue)"),
    "queue_corpus_mined": method("queue_corpus_mined", "queue_infonce", False, _queue_configs(QUEUE, distinct=True),
                                 rows="corpus_mined", ablations=("mnrl_corpus_mined",),
                                 note="queue InfoNCE on our corpus-mined triplets, a real queue (1,024 past documents) with 8 hard negatives from it"),
    "queue_hard": method("queue_hard", "queue_infonce", False, _queue_configs(QUEUE),
                         ablations=("mnrl",),
                         note="queue InfoNCE on pairs: the same real queue, hard negatives mined during training, no offline mining"),
    "mnrl_ance": method("mnrl_ance", "mnrl", False, _configs({"scale": 20.0}), rows="corpus_mined", refresh=True,
                        ablations=("mnrl_corpus_mined",),
                        note="MNRL on corpus-mined triplets whose negatives the model being trained re-mines before each epoch (ANCE)"),
    "queue_ance": method("queue_ance", "queue_infonce", False, _queue_configs(QUEUE), rows="corpus_mined", refresh=True,
                         ablations=("mnrl_ance", "queue_corpus_mined"),
                         note="the refreshed corpus negatives (ANCE) and the real queue with its hard negatives"),
    "gist": method("gist", "gist", True, _configs({"temperature": 0.01}), note="GISTEmbedLoss, guide: the frozen bundled model"),
    "cached_mnrl": method("cached_mnrl", "cached_mnrl", True, _configs({"scale": 20.0, "mini_batch_size": 32}),
                          batch_size=CACHED_BATCH_SIZE, note="CachedMNRL (GradCache), batch 128"),
}


def run_key(setting: str, method: str, config: int, seed: int) -> str:
    return f"{setting}/{method}/{config}/{seed}"


def _best_on_dev(scores: Mapping[str, float], baseline: bool) -> str | None:
    """The sentence-transformers method (``baseline``) or the method of ours with the best dev
    score (the protocol's :func:`choose_on_dev`: the first on ties); None without one."""
    return choose_on_dev({name: score for name, score in scores.items() if METHODS[name].fields["baseline"] == baseline})


def decisive_rows(scores: Mapping[str, float]) -> list[str]:
    """The rows that get more seeds, from every method's dev choice: the best sentence-transformers
    method, the best of ours, and that one's ablations."""
    ours = _best_on_dev(scores, False)
    ablations = METHODS[ours].fields["ablations"] if ours else ()
    return [name for name in dict.fromkeys([_best_on_dev(scores, True), ours, *ablations]) if name in scores]


def followed_rows(scores: Mapping[str, float], epochs: int = EPOCHS) -> list[str]:
    """What a following setting trains, from its source's dev choices: MNRL, the best
    sentence-transformers method and the best two of ours. In a one-epoch protocol a per-epoch
    refresh never runs (it re-mines before epochs 2, 3, ...), so such a method would repeat its
    ablation's run exactly: the next of ours takes its place."""
    ranked = sorted(scores, key=lambda name: -scores[name])
    ours = [name for name in ranked if not METHODS[name].fields["baseline"] and not (METHODS[name].fields["refresh"] and epochs < 2)][:2]
    return list(dict.fromkeys(["mnrl", _best_on_dev(scores, True), *ours]))


# Runs moved ahead of the config-major order: the queue diagnosis (queue_corpus_mined at the seed's
# weighted share fell 7.6 dev points below the same rows without the queue; its probe puts the
# cause in the weight w = 23 on each hard term, not in false negatives) asks first whether the
# seed's sample-code form (in-batch + top-8 queue rows, unweighted) does better (it does: 71.13 dev,
# still below the rows without a queue), then the same form on pairs (hard negatives at pair cost).
PRIORITY = (("scifact", "queue_corpus_mined", 1, 0), ("scifact", "queue_hard", 1, 0))


def run_order(settings: Sequence[str], seeds: Sequence[int]) -> Callable[[Run], tuple]:
    """The plan's sort key: :data:`PRIORITY` first, then setting by setting (in the order asked):
    every method at the tuning seed configuration by configuration, then the decisive rows' other
    seeds seed by seed (each seed's rows in the pick's order, so a partial grid is already paired by
    seed); a following setting seed by seed."""
    def key(run: Run) -> tuple:
        at = (run.setting, run.method, run.config, run.seed)
        if at in PRIORITY:
            return (0, PRIORITY.index(at))
        if PROTOCOLS[run.setting].follows:
            return (1, settings.index(run.setting), seeds.index(run.seed))
        tuning = run.seed == seeds[0]
        return (1, settings.index(run.setting), not tuning, run.config if tuning else seeds.index(run.seed))
    return key


def grid(settings: Sequence[str] = SETTINGS, seeds: Sequence[int] = (0, 1, 2)) -> Grid:
    """Every method in ``settings`` over ``seeds`` (the first: the tuning seed): the decisive rows
    alone beyond it, a following setting on its source's choices, in :func:`run_order`."""
    return Grid(list(METHODS.values()), list(settings), list(seeds),
                key=lambda run: run_key(run.setting, run.method, run.config, run.seed),
                dev_score=lambda record: record["dev"]["ndcg_at_10"],
                follows={name: protocol.follows for name, protocol in PROTOCOLS.items() if protocol.follows},
                select={name: functools.partial(followed_rows, epochs=protocol.epochs) if protocol.follows else decisive_rows
                        for name, protocol in PROTOCOLS.items()},
                order=run_order(list(settings), list(seeds)))


class Context(TrainingRows):
    """The data and training rows every run of a setting shares (:class:`TrainingRows` over :data:`PROTOCOLS`)."""

    def __init__(self, args: argparse.Namespace, data: dict[str, Any] | None = None) -> None:
        super().__init__(args, PROTOCOLS, {} if data is None else data)


def rows_cache_folder(root: str | None, setting: str, kind: str, miner: dict[str, Any] | None, dry_run: bool) -> Path | None:
    """:func:`contrastive_bert.training.retrieval_runs.rows_cache_folder` of a setting of :data:`PROTOCOLS`."""
    return retrieval_runs.rows_cache_folder(root, setting, PROTOCOLS[setting], kind, miner, dry_run)


def score(model, setting: str, ctx: Context) -> dict[str, Any]:
    """Dev and test retrieval metrics (one corpus encoding) and the general-ability block."""
    return retrieval_runs.score(model, ctx.retrieval(setting), ctx.args)


def run_one(setting: str, name: str, config_index: int, seed: int, ctx: Context) -> dict:
    args = ctx.args
    method = METHODS[name]
    batch_size = method.fields["batch_size"]
    config = dict(method.configs[config_index])
    learning_rate = config.pop("learning_rate")
    miner = config.pop("miner", None)
    rows, rows_seconds, rows_cached = ctx.train_rows(setting, method.rows, miner)
    torch.manual_seed(seed)
    model = retrieval_runs.base_model(args.device)
    recipe = TrainingRecipe(
        datasets=[PROTOCOLS[setting].data], loss=method.loss, loss_options=dict(config), epochs=PROTOCOLS[setting].epochs,
        max_steps=DRY_RUN_STEPS if args.dry_run else -1, batch_size=batch_size, learning_rate=learning_rate,
        max_seq_length=model.max_seq_length, seed=seed, save_steps=10**6, eval_steps=10**6, logging_steps=10,
        data_dir=args.data_dir, dev_task=None, eval_tasks=[],
    )
    entry = get_loss_entry(method.loss)
    loss = entry.build(model, rows, recipe)
    probe = QueueNegativeProbe(loss, retrieval_runs.relevance_by_text_id(model, ctx.retrieval(setting))) if hasattr(loss, "miner") else None
    refresh = None
    if method.fields["refresh"]:  # the same mining rule as the rows' first mining, with the model being trained
        refresh = CorpusNegativeRefresh(model, ctx.retrieval(setting), rows, max_positives_per_query=PROTOCOLS[setting].max_positives,
                                        **CORPUS_MINER)
        rows = refresh.rows
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = fit(model, rows, loss, recipe, output_dir, batch_sampler=entry.batch_sampler,
                      callbacks=None if refresh is None else [refresh])
    seconds = time.perf_counter() - start
    if probe is not None:
        probe.close()
    peak_mb = retrieval_runs.peak_rss_mb()
    load = os.getloadavg()[2]  # 15-minute load at the end of training: above ~2.5 others shared the 2 cores
    if trainer.state.global_step == 0:
        raise RuntimeError(f"{setting}/{name}: no training step was taken (batch size {batch_size}, {len(rows)} rows)")
    losses = [item["loss"] for item in trainer.state.log_history if "loss" in item]
    if losses and not all(math.isfinite(v) for v in losses):
        raise RuntimeError(f"{setting}/{name}: non-finite training loss")
    return {
        "setting": setting, "method": name, "config": config_index, "seed": seed, "learning_rate": learning_rate,
        "options": config, "miner": miner, "steps": trainer.state.global_step, "train_rows": len(rows), "train_seconds": seconds,
        "rows_seconds": rows_seconds, "rows_cached": rows_cached, "peak_rss_mb": peak_mb, "load_average_15min": load,
        "torch_threads": torch.get_num_threads(),  # seconds compare only at equal threads and load
        "queue_probe": None if probe is None else probe.summary(),
        "refreshes": None if refresh is None else refresh.history,
        "last_loss": losses[-1] if losses else None, "dry_run": bool(args.dry_run), **score(model, setting, ctx),
    }


def _untrained(setting: str, ctx: Context) -> dict:
    record = score(retrieval_runs.base_model(ctx.args.device), setting, ctx)
    return {"setting": setting, "method": "untrained", "dry_run": bool(ctx.args.dry_run), **record}


def recommended(dev: Mapping[str, float], dev_queries: int) -> str | None:
    """The method of ours a recipe trains: the best of ours on dev, unless one of its ablations
    (the same without the queue or the refresh, which cost more) is within one dev query's worth of
    nDCG@10 (100 / ``dev_queries`` points): a part that costs more must earn its place."""
    best = _best_on_dev(dev, False)
    if best is None or dev_queries < 1:
        return best
    tied = [name for name in METHODS[best].fields["ablations"]  # never a sentence-transformers method (queue_hard's is MNRL)
            if name in dev and not METHODS[name].fields["baseline"] and dev[best] - dev[name] < 100 / dev_queries]
    return choose_on_dev({name: dev[name] for name in tied}) if tied else best


def verdict(methods: dict[str, dict], untrained: dict, decisive: list[str], seeds: list[int], dev_queries: int = 0) -> dict:
    """The README's retrieval row: the best sentence-transformers method (chosen on dev) and the
    method of ours a recipe trains (:func:`recommended`), ours minus theirs paired by seed, what each
    costly part adds (``parts``: every method of ours minus each of its ablations, paired by seed;
    ``ablations``: the best of ours on dev minus its own), and the recommended method's general
    ability against the untrained model; ``pending`` until the decisive rows have every seed."""
    dev = {name: row["dev"]["ndcg_at_10"] for name, row in methods.items()}
    baseline, best, ours = _best_on_dev(dev, True), _best_on_dev(dev, False), recommended(dev, dev_queries)
    out: dict[str, Any] = {"baseline": baseline, "ours": ours, "best_of_ours_on_dev": best,
                           "tie_dev_points": 100 / dev_queries if dev_queries else None, "decisive": decisive}
    if baseline is None or ours is None:
        return {**out, "pending": True}
    out["ours_minus_baseline"] = paired_difference(methods[ours], methods[baseline], "ndcg_at_10")
    out["ablations"] = {name: paired_difference(methods[best], methods[name], "ndcg_at_10")
                        for name in METHODS[best].fields["ablations"] if name in methods}
    out["parts"] = {name: {ablation: paired_difference(methods[name], methods[ablation], "ndcg_at_10")
                           for ablation in METHODS[name].fields["ablations"] if ablation in methods}
                    for name in methods if METHODS[name].fields["ablations"]}
    out["general_vs_untrained"] = {
        "stsb": methods[ours]["stsb"]["mean"] - untrained["general"]["stsb"],
        "zero_shot_mean": methods[ours]["zero_shot_mean"]["mean"] - untrained["general"]["zero_shot_mean"],
    }
    complete = all(len(methods[n]["seeds"]) >= len(seeds) for n in [baseline, ours, best] if n in methods)
    out["pending"] = not decisive or not complete
    return out


def _cost_and_general(finished: list[dict]) -> dict:
    """Mining (or pair building) before training, the process's peak memory (runs logged before
    these were recorded have None) and the general-ability block, mean/std over the seeds."""
    return {
        "rows_seconds": mean_std([r["rows_seconds"] for r in finished]) if all("rows_seconds" in r for r in finished) else None,
        "peak_rss_mb": mean_std([r["peak_rss_mb"] for r in finished]) if all("peak_rss_mb" in r for r in finished) else None,
        "stsb": mean_std([r["general"]["stsb"] for r in finished]),
        "zero_shot": {s: mean_std([r["general"]["zero_shot"][s] for r in finished]) for s in ("banking77", "emotion", "sst2")},
        "zero_shot_mean": mean_std([r["general"]["zero_shot_mean"] for r in finished]),
    }


def _row(plan: Grid, log: Mapping[str, dict], setting: str, method: Method) -> dict | None:
    """A method's summary row from its protocol entry: the dev-chosen configuration (a following
    setting: its source's, with its own dev score), the test mean/std over the seeds finished so
    far, the cost and the general-ability block; None before its first run."""
    entry = plan.entry(log, setting, method, test=lambda r: {m: r["test"][m] for m in METRICS}, dev=lambda r: r["dev"],
                       fields=lambda finished: {"retrieval": _cost_and_general(finished)})
    if entry is None:
        return None
    chosen = entry["chosen_on_dev"]
    return {
        "baseline": method.fields["baseline"], "loss": method.loss, "rows": method.rows, "refresh": method.fields["refresh"],
        "ablations": list(method.fields["ablations"]), "note": method.fields["note"], "options": chosen["options"],
        "chosen_on_dev": {"config": chosen["config"], "configs_tried": chosen["configs_tried"],
                          "configs_planned": chosen["configs_planned"],
                          "dev_ndcg_at_10_by_config": chosen["dev_by_config"] or {str(chosen["config"]): entry["dev"]["ndcg_at_10"]}},
        "dev": entry["dev"], "test": entry["test"], "seeds": entry["seeds"],
        "steps": entry["cost"]["steps"], "epochs": PROTOCOLS[setting].epochs, "batch_size": method.fields["batch_size"],
        "train_rows": entry["cost"]["train_rows"], "train_seconds": entry["cost"]["train_seconds"], **entry["retrieval"],
    }


def dev_test_agreement(records: list[dict], close: float = 2.0) -> dict[str, Any] | None:
    """How far the dev split's choices can be trusted: over the trained runs of one setting, the
    Spearman correlation of dev and test nDCG@10, and, among the pairs of runs whose dev scores lie
    within ``close`` points, the share that test orders the same way (0.5 = a coin)."""
    from scipy.stats import spearmanr

    scores = [(r["dev"]["ndcg_at_10"], r["test"]["ndcg_at_10"]) for r in records]
    if len(scores) < 3:
        return None
    near = [(a, b) for i, a in enumerate(scores) for b in scores[i + 1:] if abs(a[0] - b[0]) < close and a[0] != b[0]]
    alike = sum(1 for a, b in near if (a[0] - b[0]) * (a[1] - b[1]) > 0)
    if len({d for d, _ in scores}) == 1 or len({t for _, t in scores}) == 1:
        rho = math.nan  # undefined when one side is constant (scipy would warn and say NaN)
    else:
        rho = float(spearmanr([d for d, _ in scores], [t for _, t in scores]).statistic)
    return {"runs": len(scores), "spearman": None if math.isnan(rho) else rho,
            f"pairs_within_{close:g}_dev_points": len(near), "share_test_orders_alike": alike / len(near) if near else None}


def summarize(records: list[dict], seeds: list[int]) -> dict:
    """``retrieval_quality.json``: per setting the untrained scores and, per method with runs, the
    dev-chosen configuration and its test mean/std over the seeds finished so far."""
    out: dict[str, Any] = {}
    log = {r["key"]: r for r in records if not r.get("dry_run")}
    plan = grid(SETTINGS, seeds)
    for setting in SETTINGS:
        mine = [r for r in records if r["setting"] == setting and not r.get("dry_run")]
        untrained = next((r for r in mine if r["method"] == "untrained"), None)
        if untrained is None:
            continue
        protocol = PROTOCOLS[setting]
        methods = {name: row for name, method in METHODS.items() if (row := _row(plan, log, setting, method)) is not None}
        decisive = plan.selected(log, setting) or []
        planned = {name: len(plan.planned(log, setting, METHODS[name])) for name in (decisive if protocol.follows else METHODS)}
        done = {name: sum(1 for r in mine if r["method"] == name) for name in METHODS}
        diagnosis = {f"{r['method']}/{r['config']}/{r['seed']}": {
            "options": r["options"], "learning_rate": r["learning_rate"], "dev_ndcg_at_10": r["dev"]["ndcg_at_10"],
            "last_loss": r["last_loss"], **{k: r["queue_probe"][k] for k in ("steps_with_full_queue", "full", "thirds")},
        } for r in mine if r.get("queue_probe")}
        out[setting] = {
            "verdict": verdict(methods, untrained, decisive, seeds, protocol.dev_queries),
            "queue_diagnosis": diagnosis,
            "dev_test_agreement": dev_test_agreement([r for r in mine if r["method"] != "untrained"]),
            "untrained": {"dev": untrained["dev"], "test": untrained["test"], **untrained["general"]},
            "methods": methods,
            "decisive": decisive,
            "protocol": {"data": protocol.data, "epochs": protocol.epochs, "max_positives_per_query": protocol.max_positives,
                         "dev_queries": protocol.dev_queries,
                         "follows": protocol.follows, "note": protocol.note},
            "missing_runs": {name: planned[name] - done[name] for name in planned if done[name] < planned[name]},
        }
    return out


LABEL_OFFSETS = ((5, 4), (5, -11), (-5, 4), (-5, -11), (5, 13), (5, -20), (-5, 13), (-5, -20))  # points from the marker


def label_offsets(points: Sequence[tuple[float, float]], labels: Sequence[str],
                  limits: tuple[tuple[float, float], tuple[float, float]], size: tuple[float, float],
                  errors: Sequence[float] | None = None,
                  char_width: float = 4.6, height: float = 9.0, marker: float = 4.0) -> list[tuple[int, int]]:
    """Where to write each point's label, in points from its marker, so that no label covers another
    label or a marker with its error bar and each stays inside the axes, where one of
    ``LABEL_OFFSETS`` allows it: greedy, left to right. ``points`` and ``errors`` (the error bars'
    half-heights) are data coordinates, mapped onto an axes of ``size`` points spanning ``limits``
    ((x0, x1), (y0, y1)); a label is ``char_width`` points a character wide and ``height`` points
    high (fontsize 8)."""
    (x0, x1), (y0, y1) = limits
    scale_x, scale_y = size[0] / ((x1 - x0) or 1.0), size[1] / ((y1 - y0) or 1.0)
    at = [((px - x0) * scale_x, (py - y0) * scale_y) for px, py in points]
    bars = [(e or 0.0) * scale_y for e in (errors or [0.0] * len(points))]
    taken = [(x - marker, y - bar - marker, x + marker, y + bar + marker) for (x, y), bar in zip(at, bars)]
    chosen: list[tuple[int, int]] = [LABEL_OFFSETS[0]] * len(points)
    for i in sorted(range(len(points)), key=lambda i: points[i]):
        x, y = at[i]
        width = char_width * len(labels[i])

        def box(dx: int, dy: int) -> tuple[float, float, float, float]:
            left = x + dx if dx >= 0 else x + dx - width
            return (left, y + dy, left + width, y + dy + height)

        boxes = {offset: box(*offset) for offset in LABEL_OFFSETS}
        free = [offset for offset, b in boxes.items() if not any(b[0] < t[2] and t[0] < b[2] and b[1] < t[3] and t[1] < b[3] for t in taken)]
        inside = [offset for offset in free if 0 <= boxes[offset][0] and boxes[offset][2] <= size[0]
                  and 0 <= boxes[offset][1] and boxes[offset][3] <= size[1]]
        chosen[i] = (inside or free or LABEL_OFFSETS)[0]
        taken.append(boxes[chosen[i]])
    return chosen


def plot(summary: dict, path: Path) -> None:
    """Test nDCG@10 (mean ± std over seeds) against the cost of a run (training seconds, mining and
    refreshes included), one panel per setting; grey: sentence-transformers, blue: ours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = [s for s in SETTINGS if s in summary and summary[s]["methods"]]
    if not settings:
        return
    fig, axes = plt.subplots(1, len(settings), figsize=(7.5 * len(settings), 5), squeeze=False)
    panels = []
    for ax, setting in zip(axes[0], settings):
        block = summary[setting]
        points, labels, errors = [], [], []
        for name, run in block["methods"].items():
            cost = run["train_seconds"]["mean"] + ((run.get("rows_seconds") or {}).get("mean") or 0.0)
            mean, std = run["test"]["ndcg_at_10"]["mean"], run["test"]["ndcg_at_10"]["std"]
            color = "tab:gray" if run["baseline"] else "tab:blue"
            ax.errorbar([cost], [mean], yerr=[std or 0.0], fmt="o", color=color, capsize=3)
            points.append((cost, mean))
            errors.append(std or 0.0)
            labels.append(f"{name} ({len(run['seeds'])})")
        ax.axhline(block["untrained"]["test"]["ndcg_at_10"], color="k", linestyle="--", linewidth=1, label="untrained")
        ax.set_xlabel("seconds per run on this machine: mining + training (2 CPU cores)")
        ax.set_ylabel("test nDCG@10 (mean ± std; (n) seeds)")
        ax.set_title(f"{setting}: grey = sentence-transformers, blue = contrastive_bert")
        ax.legend(loc="lower right")
        panels.append((ax, points, labels, errors))
    fig.tight_layout()
    for ax, points, labels, errors in panels:  # labels placed on the final axes
        extent = ax.get_window_extent()
        size = (extent.width * 72 / fig.dpi, extent.height * 72 / fig.dpi)
        offsets = label_offsets(points, labels, (ax.get_xlim(), ax.get_ylim()), size, errors)
        for point, label, (dx, dy) in zip(points, labels, offsets):
            ax.annotate(label, point, textcoords="offset points", xytext=(dx, dy), fontsize=8, ha="left" if dx >= 0 else "right")
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, output=RESULTS / "retrieval_quality.json", run_log=RESULTS / "retrieval_quality_runs.jsonl",
                         seeds=[0, 1, 2], methods=list(METHODS))
    retrieval_runs.add_run_arguments(parser, SETTINGS)
    args = parser.parse_args(argv)
    budget = setup_from_args(args)
    settings = retrieval_runs.chosen_settings(args, SETTINGS)
    methods = selected(args, list(METHODS))
    log = RunLog(args.run_log)
    output = Path(args.output)

    def write_summary() -> None:
        summary = summarize(log.records(), args.seeds)
        write_results(output, {"protocol": {"epochs": "per setting (its protocol block)", "batch_size": BATCH_SIZE,
                                            "cached_batch_size": CACHED_BATCH_SIZE, "max_seq_length": MAX_SEQ_LENGTH,
                                            "max_positives_per_query": "per setting (its protocol block)",
                                            "learning_rates": list(LR), "seeds": args.seeds,
                                            "dev": "scifact: 10% of the train queries (the package's dev-split rule); nfcorpus: its dev split",
                                            "tuning": "learning rates 2e-5 and 5e-5 (ST's miner: also its documented example; the queue rows: the seed's "
                                                      "hard-negative share 0.15 over the whole queue at 2e-5, then in-batch + the top-8 queue rows only at both rates) on dev at the first "
                                                      "seed; then the other seeds of the dev choice for the decisive rows: the best "
                                                      "sentence-transformers method, the best of ours, and its ablation"},
                               "methods_planned": {n: {"loss": m.loss, "rows": m.rows, "baseline": m.fields["baseline"],
                                                       "note": m.fields["note"], "configs": list(m.configs)} for n, m in METHODS.items()},
                               **summary}, device=args.device)
        plot(summary, output.with_suffix(".png"))

    if args.summary_only:
        write_summary()
        return 0
    ctx = Context(args)
    for setting in settings:
        key = run_key(setting, "untrained", 0, 0)
        if key not in log.of_mode(args.dry_run) and budget.allows("untrained"):
            with budget.timed("untrained"):
                log.append(key, _untrained(setting, ctx))
            write_summary()
    plan = grid(settings, args.seeds)
    return run_plan(plan, log, methods, args, budget, lambda run: run_one(run.setting, run.method, run.config, run.seed, ctx),
                    key=lambda run: run_key(run.setting, run.method, run.config, run.seed), write_summary=write_summary,
                    report=lambda r: (f"dev nDCG@10 {r['dev']['ndcg_at_10']:.2f}, test {r['test']['ndcg_at_10']:.2f} "
                                      f"({r['train_seconds']:.0f} s)"))

if __name__ == "__main__":
    raise SystemExit(main())
