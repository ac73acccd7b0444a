"""Write the pages whose figures come from files: README.md, docs/results.md and
docs/results_archive.md from their templates and eval/results/*.json (the README's tables are its
generated blocks, render_readme.py), and the data cards data/*.md from the data sets' DatasetSpec
(render_data_cards.py), and the recipes' comments scripts/recipes/*.yaml from scripts/recipes/comments/*.in
(render_recipes.py). A figure is then written once, in its JSON or its spec, and cannot drift.

    python scripts/render_docs.py            # rewrite every page
    python scripts/render_docs.py --check    # exit 1 and name the pages that differ (CI)

Templates (docs/templates/*.md.in) hold the prose. In them, ``{{table NAME ARG...}}`` is replaced by
the table ``table_NAME(results, ARG...)`` renders (a :class:`render_table.Table` row where the
entries sit in one block of one file, else a function that gathers them; all drawn by ``benchmark_table``),
``{{link FILE}}`` by a link to ``eval/results/FILE.json``, ``{{v FILE PATH}}`` by one value of
``eval/results/FILE.json`` (PATH: keys joined by dots; a ``{mean, std, values}`` record prints as
``mean ± std``), and ``{{d FILE PATH FILE PATH}}`` by the signed difference of two values.
A value may end in ``|FORMAT`` (``|.1f``). tests/test_docs_current.py fails when a page differs
from what this script renders now.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from render_data_cards import builtin_specs, data_card, data_index
from render_labels import (ACL_COST_LABELS, ACL_LABELS, ACL_OPTIONS, ACL_SHORT_LABELS, BASELINE_LABELS, EXIT_COST_LABELS,
                           EXIT_METHODS, GENERAL_LABELS, MEMORY_BUDGET_LABELS, PAIR_LABELS, QUEUE_MEMORY_LABELS, QUEUE_QUALITY_LABELS,
                           RETRIEVAL_LABELS, TOPK_LABELS, ZERO_SHOT_LABELS)
from render_readme import paired, render_readme, table_acl_verdict, table_early_exit_round, table_early_exit_rounds, table_emotion_full_data  # noqa: F401 (table_*: also placeholders of the templates)
from render_recipes import render_recipes, table_recipes, table_recipes_summary  # noqa: F401 (table_*: placeholders)
from render_cpu_precision import table_cpu_precision  # noqa: F401 (a table)
from render_scale import table_scale_cli, table_scale_encode, table_scale_growth, table_scale_index, table_scale_mine  # noqa: F401
from render_table import Column, Table, benchmark_table, cell, per_key
from render_values import GENERATED, Results, fmt, is_stat, link, lookup, mean_of

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "docs" / "templates"
OPTION_NAMES = {"learning_rate": "lr"}


def options_text(options: Mapping[str, object], names: Mapping[str, str] = OPTION_NAMES) -> str:
    """A configuration in a cell: ``scale 20.0, lr 2e-05``; a nested block inline (``miner.range_max 100``), unset options left out."""
    flat: dict[str, object] = {}
    for key, value in options.items():
        if isinstance(value, Mapping):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        elif value is not None:
            flat[key] = value
    return ", ".join(f"{names.get(k, k)} {v}" for k, v in flat.items())


# ---------------------------------------------------------------- cells of the shared result shape (benchmarking.protocol)


def if_trained(path: str) -> Callable[[Mapping], object]:
    """The value at ``path``, or None for a row that trains nothing (no loss: the untrained model)."""
    return lambda entry: None if entry.get("loss") is None else lookup(entry, path, strict=False) or None


def point_or_stat(path: str) -> Callable[[Mapping], object]:
    """The value at ``path``; for a row that trains nothing (no loss: the untrained model) its one point, the mean."""
    def value(entry: Mapping) -> object:
        found = lookup(entry, path, strict=False)
        return mean_of(found) if entry.get("loss") is None and found is not None else found
    return value


def configs_run(chosen: Mapping) -> str:
    """How many of the planned configurations ran on dev: ``(2/3)``."""
    return f"({chosen['configs_tried']}/{chosen['configs_planned']})"


# ---------------------------------------------------------------- the tables: ``table_NAME`` for ``{{table NAME ARG...}}``


def table_pairs(results: Results, setting: str) -> str:
    """One setting of pairs_quality.json (``{{table pairs SETTING}}``): dev-chosen configuration, dev,
    test mean ± std (seeds) in the setting's own metric, then each general-ability score any entry has."""
    data = results["pairs_quality"]
    entries, metric = data["settings"][setting], data["protocol"]["test_metric"][setting]
    general = dict.fromkeys(name for entry in entries.values() for name in entry.get("general") or {})
    columns = [Column("chosen on dev (configs run/planned)", if_trained("chosen_on_dev"), lambda c: f"{options_text(c['options'])} {configs_run(c)}"),
               Column("dev", f"dev.{metric}"), Column("test: mean ± std (seeds)", point_or_stat(f"test.{metric}"), "seeds")]
    columns += [Column(GENERAL_LABELS.get(name, name), point_or_stat(f"general.{name}")) for name in general]
    return benchmark_table(entries, columns, PAIR_LABELS, unlabelled="`{}`")


# The untrained row holds single values where the methods hold {mean, std, values} over seeds.
RETRIEVAL_COLUMNS = [
    Column("chosen on dev (configs run/planned)", lambda run: run if "chosen_on_dev" in run else None,
           lambda run: f"{options_text(run['options'])} {configs_run(run['chosen_on_dev'])}"),
    Column("dev nDCG@10", "dev.ndcg_at_10"), Column("test nDCG@10: mean ± std (seeds)", "test.ndcg_at_10", "seeds"),
    Column("test MAP@100", "test.map_at_100", "mean"), Column("test Recall@100", "test.recall_at_100", "mean"),
    Column("STS-B test", "stsb", "mean"),
    Column("zero-shot mean (B77 / emotion / SST-2)", "", lambda run: f"{fmt(mean_of(run['zero_shot_mean']), '.1f')} "
           f"({' / '.join(fmt(mean_of(run['zero_shot'][k]), '.1f') for k in ('banking77', 'emotion', 'sst2'))})"),
    Column("mining s", "rows_seconds", "mean.0f"), Column("train s", "train_seconds", "mean.0f"), Column("peak MiB", "peak_rss_mb", "mean.0f"),
]


def table_retrieval(results: Results) -> str:
    """retrieval_quality.json, per setting: the untrained model and each method's dev-chosen
    configuration, dev and test nDCG@10 (test: mean ± std over seeds), MAP@100, Recall@100, the
    general-ability block (STS-B, mean zero-shot accuracy over Banking77, emotion and SST-2), the
    cost (mining and training seconds, peak memory), then the runs the plan still misses."""
    if not results.has("retrieval_quality"):
        return "*Not run yet: `eval/results/retrieval_quality.json` does not exist.*"
    blocks = []
    for setting, block in results["retrieval_quality"].items():
        if isinstance(block, Mapping) and "untrained" in block:
            rows = {"untrained": block["untrained"], **block["methods"]}
            missing = ", ".join(f"`{k}` {v}" for k, v in (block.get("missing_runs") or {}).items())
            blocks.append(f"*{setting}*\n\n" + benchmark_table(rows, RETRIEVAL_COLUMNS, RETRIEVAL_LABELS, unlabelled="`{}`")
                          + (f"\n\nRuns still missing (configurations + seeds of the plan): {missing}" if missing else ""))
    return "\n\n".join(blocks) or "*Not run yet: no setting of `retrieval_quality.json` has results.*"


PARTS_COLUMNS = [
    Column("dev nDCG@10 difference (seed 0)", "dev", "+.2f"),
    Column("test nDCG@10 difference, paired by seed", "test", paired),
]


def table_retrieval_parts(results: Results, setting: str = "scifact") -> str:
    """retrieval_quality.json ``verdict.parts``: what each costly part of ours (the queue, the
    per-epoch refresh) adds over the same method without it, dev at seed 0 and test paired by seed."""
    if not results.has("retrieval_quality") or setting not in results["retrieval_quality"]:
        return "*Not run yet.*"
    block = results["retrieval_quality"][setting]
    methods, parts = block["methods"], (block.get("verdict") or {}).get("parts") or {}
    rows = {f"`{name}` − `{ablation}`": {"dev": methods[name]["dev"]["ndcg_at_10"] - methods[ablation]["dev"]["ndcg_at_10"],
                                          "test": diff}
            for name, ablations in parts.items() for ablation, diff in ablations.items()}
    return benchmark_table(rows, PARTS_COLUMNS, first="method − the same without its part") if rows else "*No ablation pair has run yet.*"


MEMORY_BUDGET_COLUMNS = [
    Column("chosen on dev (configs run/planned)", if_trained("chosen_on_dev"),
           lambda c: f"lr {c.get('options', {}).get('learning_rate', '')} ({c['configs_tried']}/{c['configs_planned']})"),
    Column("dev nDCG@10", "dev.ndcg_at_10"), Column("test nDCG@10: mean ± std (seeds)", point_or_stat("test.ndcg_at_10"), "seeds"),
    Column("s / optimizer step", "seconds_per_step", "mean.1f"), Column("train s", "train_seconds", "mean.0f"),
    Column("peak memory of training, GiB", "peak_memory_mb", lambda v: fmt(mean_of(v) / 1024, ".2f")),
    Column("document / anchor gradient norm", "gradient_norms", "mean.2f"),
    Column("STS-B test", point_or_stat("stsb"), "mean.1f"), Column("zero-shot mean", point_or_stat("zero_shot_mean"), "mean.1f"),
]


def table_memory_budget(results: Results, setting: str = "scifact") -> str:
    """memory_budget.json, one setting: the untrained model and each method's dev-chosen learning
    rate, dev and test nDCG@10, seconds per optimizer step and of training, the peak memory of
    training, ContAccum's gradient-norm diagnosis (queue rows), the general-ability block."""
    if not results.has("memory_budget") or setting not in results["memory_budget"]:
        return "*Not run yet.*"
    block = results["memory_budget"][setting]
    chosen = {name: {**row, "chosen_on_dev": {**row["chosen_on_dev"], "options": row["options"]}} for name, row in block["methods"].items()}
    rows = {"untrained": {"loss": None, "dev": block["untrained"]["dev"], "test": block["untrained"]["test"],
                          "stsb": block["untrained"].get("stsb"), "zero_shot_mean": block["untrained"].get("zero_shot_mean")}, **chosen}
    missing = block.get("missing_runs")
    return (benchmark_table(rows, MEMORY_BUDGET_COLUMNS, MEMORY_BUDGET_LABELS, unlabelled="`{}`")
            + (f"\n\nRuns the plan still has to make in this setting (as far as it has decided): {missing}." if missing else ""))


def table_memory_budget_timing(results: Results) -> str:
    """memory_budget.json ``timing``: the timing pass (every method back to back in one process on a
    quiet machine): median seconds of an optimizer step (64 rows), relative to accumulated MNRL;
    beside it the peak memory of the grid's SciFact runs (one training a process: in the timing
    pass's one process an earlier method's allocator hides the next one's memory)."""
    timing = results["memory_budget"].get("timing") if results.has("memory_budget") else None
    if not timing:
        return "*The timing pass has not run yet (`eval/bench_memory_budget.py --timing`).*"
    grid = (results["memory_budget"].get("scifact") or {}).get("methods") or {}
    timing = {name: {**row, "grid_peak_memory_mb": (grid.get(name) or {}).get("peak_memory_mb")} for name, row in timing.items()}
    base = (timing.get("mnrl_accumulated") or {}).get("median_step_seconds")
    columns = [Column("s / optimizer step (median)", "median_step_seconds", ".1f"),
               Column("vs accumulated MNRL", "median_step_seconds", lambda v: f"{v / base:.2f}x" if base else ""),
               Column("peak memory of training (the grid's runs), GiB", "grid_peak_memory_mb", lambda v: fmt(mean_of(v) / 1024, ".2f"))]
    return benchmark_table(timing, columns, MEMORY_BUDGET_LABELS, unlabelled="`{}`")


QUEUE_DIAGNOSIS_COLUMNS = [
    Column("configuration", "", lambda run: options_text({**run["options"], "learning_rate": run["learning_rate"]})),
    Column("dev nDCG@10", "dev_ndcg_at_10"), Column("last loss", "last_loss"),
    Column("steps with a full queue", "steps_with_full_queue", lambda steps: steps if isinstance(steps, str) else cell(steps)),
    Column("hard negatives judged relevant", "full.hard_relevant", "{:.1%}"),
    Column("plain queue negatives judged relevant", "full.queue_relevant", "{:.1%}"), Column("hard: age (steps)", "full.age", ".1f"),
    Column("hard: positive − hard cosine", "full.gap", ".3f"), Column("distinct texts among the hard", "full.distinct"),
    Column("weight w of each hard term", "full.weight", ".1f"),
]


def _probe_window(run: Mapping) -> Mapping:
    """The probe figures a run's row shows: those over the steps with a full queue; for a run whose
    queue never filled (NFCorpus's one short epoch), its last third's, said so in the steps cell."""
    if run.get("steps_with_full_queue") or not run.get("thirds"):
        return run
    last = run["thirds"][-1]
    size = run.get("options", {}).get("queue_size")
    return {**run, "full": last, "steps_with_full_queue": f"0 (last third shown: {fmt(last['fill'], '.0f')} of {size} rows filled)"}


def table_retrieval_queue_diagnosis(results: Results) -> str:
    """retrieval_quality.json ``queue_diagnosis``: per queue run (of any setting), what its hard
    negatives were over the steps with a full queue, or over the last third of a run whose queue
    never filled (QueueNegativeProbe)."""
    if not results.has("retrieval_quality"):
        return "*Not run yet.*"
    runs = {f"{setting}/{key}": _probe_window(run) for setting, block in results["retrieval_quality"].items() if isinstance(block, Mapping)
            for key, run in (block.get("queue_diagnosis") or {}).items()}
    return benchmark_table(runs, QUEUE_DIAGNOSIS_COLUMNS, first="run (method/config/seed)") if runs else "*No queue run has finished yet.*"


ACL_COLUMNS = [
    Column("chosen on dev", if_trained("chosen_on_dev.options"), lambda options: options_text(options, ACL_OPTIONS)),
    Column("dev acc.", "dev.accuracy"), Column("test acc.: mean ± std (seeds)", "test.accuracy", "seeds"),
    Column("test macro-F1", "test.macro_f1"), Column("train s", "cost.train_seconds", "mean.0f"),
    Column("STS-B after", "general.stsb", "mean"), Column("zero-shot mean after", "general.zero_shot_mean", "mean"),
    Column("ACL-Grad gated", "gated_share", "{:.1%}"), Column("mean angle", "mean_angle", "{:.0f}°"),
    Column("cheap angle agrees with exact", "agreement_with_exact", "{:.0%}", only=("acl_embed_grad",)),  # all record it; ACL-Grad uses it
]
ACL_PROBE_COLUMNS = [  # regimes whose runs score a linear probe of their own embeddings (full16k)
    Column("linear probe of its embeddings, test acc.", "probe_test_accuracy", "mean"),
    Column("label head − probe", "head_minus_probe", "mean"),
]


def _acl_columns(entries: Mapping) -> list[Column]:
    """The ACL table's columns; the probe's only where a run scored one."""
    probed = any(isinstance(entry, Mapping) and entry.get("probe_test_accuracy") for entry in entries.values())
    return ACL_COLUMNS + (ACL_PROBE_COLUMNS if probed else [])


table_acl = Table("acl_quality:settings.{0}/{1}", _acl_columns,  # {{table acl DATASET REGIME}}
                  ACL_LABELS, missing="*Not run yet: `acl_quality.json` has no {0} {1} results.*")
table_acl_cost = Table("acl_quality_protocol:acl_grad_cost.ratio_to_ce", [Column("time per step vs CE", "", "{:.2f}x")], ACL_COST_LABELS,
                       first="variant", skip=("ce",))
table_acl_short = Table("bench_acl:datasets", lambda data: per_key(next(iter(data.values()))["summary"], "summary.{}", ACL_SHORT_LABELS),
                        first="data set")


def zero_shot_accuracy(key: str) -> Callable[[Mapping], object]:
    """A zero-shot test accuracy: the test block's ``key``, else the general block's ``zero_shot_key``; of one seed, the mean alone."""
    def value(entry: Mapping) -> object:
        found = entry["test"].get(key, (entry.get("general") or {}).get(f"zero_shot_{key}"))
        return found if len(entry["seeds"]) > 1 else mean_of(found)
    return value


table_zero_shot = Table("bench_zero_shot:settings.unseen20", [
    *(Column(header, zero_shot_accuracy(key)) for header, key in (
        ("20 unseen intents (by name)", "heldout20"), ("57 seen intents (trained head)", "seen57"),
        ("all 77, unseen rows", "all77_heldout_rows"), ("emotion (names)", "emotion"), ("SST-2 (names)", "sst2"))),
    Column("seeds", "seeds", lambda seeds: str(len(seeds)))], ZERO_SHOT_LABELS, first="model")


def dev_candidates(entries: Mapping[str, Mapping], config_text: Callable[[Mapping], str]) -> dict[tuple[str, str], float]:
    """Every configuration each method tried on dev, the chosen one marked: ``(method, configuration)
    -> dev score``, from the shared result shape's ``chosen_on_dev``."""
    rows = {}
    for name, entry in entries.items():
        chosen = entry.get("chosen_on_dev") or {}
        for config, score in (chosen.get("dev_by_config") or {}).items():
            rows[(name, config_text(chosen["options_by_config"][config]) + (" (chosen)" if config == str(chosen["config"]) else ""))] = score
    return rows


def table_zero_shot_dev(results: Results) -> str:
    """bench_zero_shot.json: each configuration the tuned methods tried on the dev split of intents, the chosen one marked."""
    entries = results["bench_zero_shot"]["settings"]["unseen20"]
    tuned = {name: e for name, e in entries.items() if name != "untrained" and (e.get("chosen_on_dev") or {}).get("options_by_config")}
    rows = {("untrained", ""): lookup(entries, "untrained.dev.unseen10", strict=False),
            **dev_candidates(tuned, lambda c: f"{c['epochs']:g} epoch(s), λ {c['contrastive_weight']}")}
    return benchmark_table(rows, [Column("dev: zero-shot on 10 other unseen intents")],
                           lambda key: (ZERO_SHOT_LABELS.get(key[0].removesuffix("_tuned"), key[0]), key[1]), first=["model", "configuration"])


def _early_exit_measured(results: Results) -> Mapping:
    """early_exit.json in the layout these tables read: the file itself, or, once the benchmark on
    the dev-chosen classifier has written it, the earlier measurement it keeps under ``old_300_step_backbone``."""
    data = results["early_exit"]
    return data.get("old_300_step_backbone", data)


def table_exits(results: Results) -> str:
    """Per-exit test accuracy of the CLI-trained multi-exit model (early_exit.json: truncated rows + full)."""
    batch = next(iter(_early_exit_measured(results)["batch_sizes"].values()))
    row = {**{str(r["depth"]): r for r in batch["truncated"]}, "final classifier": batch["full"]}
    return benchmark_table({"test accuracy": row}, per_key(row, "{}.accuracy"), first="exit on layer")


def _threshold(value: object) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else ("" if value is None else str(value))


def table_early_exit(results: Results) -> str:
    """Every row of early_exit.json's sweeps, per batch size: accuracy, depth, throughput, CPU speed-up over the full model."""
    blocks = []
    for batch_size, batch in _early_exit_measured(results)["batch_sizes"].items():
        if not isinstance(batch, Mapping) or "full" not in batch:
            continue
        rows = {"full model": batch["full"]}
        for key, what in (("sweep", "early exit"), ("sweep_per_batch", "no regrouping")):
            rows.update({f"{what}, {r['criterion']} {_threshold(r['threshold'])}": r for r in batch.get(key, [])})
        rows.update({f"truncated to {r['depth']} layers": r for r in batch.get("truncated", [])})
        base = batch["full"].get("cpu_throughput")
        columns = [Column("accuracy", "accuracy"), Column("avg. layers", "avg_layers"), Column("sentences / CPU-s", "cpu_throughput", ".0f"),
                   Column("speed-up (CPU)", "cpu_throughput", lambda v, base=base: f"{v / base:.2f}x" if v and base else ""),
                   Column("sentences / s (wall)", "throughput", ".0f")]
        blocks.append(f"*Batch {batch_size}:*\n\n" + benchmark_table(rows, columns, first=""))
    return "\n\n".join(blocks)


def table_early_exit_summary(results: Results) -> str:
    """early_exit.json's ``summary``: one row per entry and batch size, whatever the entries are."""
    rows = {(name, size): row for name, by_batch in _early_exit_measured(results).get("summary", {}).items()
            for size, row in by_batch.items() if isinstance(row, Mapping)}
    columns = [Column("criterion", "", lambda r: f"{r.get('criterion', '')} {_threshold(r.get('threshold'))}".strip()),
               Column("accuracy", "accuracy"), Column("points lost", "accuracy_loss"),
               Column("speed-up (CPU clock)", "cpu_speedup"), Column("speed-up (wall clock)", "speedup")]
    return benchmark_table(rows, columns, lambda key: (f"`{key[0]}`", key[1]), first=["summary entry", "batch"])


def table_early_exit_cost(results: Results) -> str:
    """early_exit.json: the CPU milliseconds of each part of the forward pass, a column per batch size."""
    costs = {size: batch["cost_ms_per_batch"] for size, batch in _early_exit_measured(results)["batch_sizes"].items()
             if "cost_ms_per_batch" in batch}
    rows = {key: {size: cost[key] for size, cost in costs.items()} for key in EXIT_COST_LABELS}
    return benchmark_table(rows, per_key(costs, "{}", "batch {}"), EXIT_COST_LABELS, first="CPU ms per batch")


def table_early_exit_best(results: Results) -> str:
    """early_exit.json's ``table`` (issue 28): per data set the dev-chosen classifier in full, early
    exit at each stage-2 seed's dev-chosen setting (mean ± std), its own exit at the average depth,
    and the AdaptiveLayerLoss model cut to that depth (points lost: against its own full depth)."""
    rows = {(row["dataset"], row["row"]): row for row in results["early_exit"]["table"]}
    lost = Column("points lost", "", lambda row: fmt(row.get("accuracy_loss", row.get("accuracy_loss_vs_own_full"))))
    speed = [Column(f"speed-up, batch {size} ({clock})", f"speedup.{size}.{key}", lambda v: f"{fmt(v)}x")
             for size in (32, 1) for clock, key in (("CPU", "cpu"), ("wall", "wall"))]
    columns = [Column("test accuracy", "test_accuracy"), lost, Column("avg. layers", "avg_layers"), *speed]
    return benchmark_table(rows, columns, lambda key: key, first=["data set", "model"])


def table_early_exit_batch1(results: Results, dataset: str) -> str:
    """CPU ms per sentence of one batch-1 call, piece by piece (``batch1_profile`` of early_exit.json,
    ``eval/profile_early_exit.py``): early exit at the first seed's dev choice against the full model."""
    profile = results["early_exit"]["datasets"][dataset]["batch1_profile"]
    pieces, full = profile["pieces_ms"], profile["full_pieces_ms"]
    layers = sorted({int(k.split("_")[1]) for k in pieces if k.startswith(("layer_", "head_"))})
    order = ["tokenise", "embed", "mask"] + [f"{kind}_{n}" for n in layers for kind in ("layer", "head")] + ["decision"]
    rows = {name: {"early": pieces.get(name), "full": full.get(name)} for name in order if name in pieces}
    rows["encoder layers 1-6 in one call"] = {"full": full.get("hf_forward_all_layers")}
    rows["final label head"] = {"full": full.get("final_head")}
    rows["the rest (Python around the pieces)"] = {"early": profile.get("other_ms"), "full": profile.get("full_other_ms")}
    rows["whole call, uninstrumented"] = {"early": profile.get("early_exit_ms"), "full": profile.get("full_model_ms")}
    columns = [Column(f"early exit ({profile['criterion']} {_threshold(profile['threshold'])}, {profile['avg_layers']:.2f} layers)",
                      "early", ".3f"), Column("full model", "full", ".3f")]
    names = {"tokenise": "tokenisation", "embed": "embeddings", "mask": "attention mask", "decision": "exit decisions"}
    names.update({f"layer_{n}": f"encoder layer {n}" for n in layers} | {f"head_{n}": f"exit head on layer {n}" for n in layers})
    return benchmark_table(rows, columns, names, first="CPU ms per sentence, batch 1")


def _one_seed_mean(value: object) -> str:
    """``mean ± std``, or the mean alone for one seed (std 0)."""
    return fmt(value["mean"] if is_stat(value) and not value["std"] else value, ".1f")  # type: ignore[index]


def table_multi_exit(results: Results, stem: str, dataset: str) -> str:
    """Per-layer accuracy of each exit head and method (``{{table multi_exit FILE DATASET}}``)."""
    data = results[stem][dataset]
    rows = {"final classifier applied to the layer (no exit training)": data["truncated"]}
    rows.update({f"{'MHA' if head == 'mha' else head} exit, {EXIT_METHODS.get(method, method)}": accuracy
                 for head, methods in data["summary"]["per_layer"].items() for method, accuracy in methods.items()})
    return benchmark_table(rows, per_key(data["truncated"], spec=_one_seed_mean), first="exit on layer")


def table_queue_step_time(results: Results) -> str:
    """queue_speed_step_time.json: MNRL's median step time, then each queue size's overhead over it."""
    steps = results["queue_speed_step_time"]["step_time"]
    sizes = sorted({run["queue_size"] for run in steps.values() if run["queue_size"]})
    rows = {"MNRL": {str(sizes[0]): f"{steps['mnrl']['median_s']:.3f} s"}}
    for label, hard in (("QueueInfoNCE, queue only", 0), ("QueueInfoNCE + 8 hard negatives", 8)):
        rows[label] = {str(run["queue_size"]): f"{100 * run['overhead_vs_mnrl']:+.1f}%" for run in steps.values()
                       if run["queue_size"] and run["hard"] == hard}
    return benchmark_table(rows, per_key(sizes, "{}", "K = {:,}"), first="step time, batch 32 (median)")


def topk_name(key: str) -> str:
    """``K4096_q32`` -> ``K = 4,096, 32 queries``."""
    size, queries = re.match(r"K(\d+)_q(\d+)", key).groups()  # type: ignore[union-attr]
    return f"K = {int(size):,}, {queries} queries"


table_queue_topk = Table("queue_speed:topk", per_key(TOPK_LABELS, "{}", TOPK_LABELS, "{:,.1f} ms"), topk_name, first="top-64 search")
table_queue_memory = Table("queue_speed:memory", lambda memory: [
    *per_key([b for b in next(iter(memory.values())) if b.isdigit()], "{}.step_increase_mib", "batch {}", "{:,.0f} MiB"),
    Column("last / first", "ratio_last_to_first", "{:.2f}x")], QUEUE_MEMORY_LABELS, first="peak memory of one step (RSS increase)")


def table_baselines(results: Results) -> str:
    """baselines.json: the untrained model (STS-B, Banking77, emotion), then each fine-tuned one (STS-B)."""
    data = results["baselines"]
    columns = [Column("STS-B test Spearman", lambda r: r["stsb_test"] if "stsb_test" in r else r["stsb"]["main_score"]),
               Column("Banking77 acc. (log. reg.)", "banking77.accuracy"), Column("Banking77 1-NN", "banking77.knn_accuracy_k1"),
               Column("emotion acc. (log. reg.)", "emotion.accuracy")]
    return benchmark_table({"untrained": data["untrained"], **data["fine_tuned"]}, columns, BASELINE_LABELS, first="model")


def table_queue_quality(results: Results) -> str:
    """queue_quality_sts.json beside queue_quality_answer_selection.json: a row per method, a column per file."""
    sts, qa = results["queue_quality_sts"], results["queue_quality_answer_selection"]
    qa_runs = qa["results"]["answer_selection"]
    rows = {"untrained": {"sts": sts["untrained"]["sts"], "qa": qa["untrained"]["answer_selection"]},
            **{name: {"sts": run, "qa": qa_runs.get(name)} for name, run in sts["results"]["sts"].items()}}
    columns = [Column("STS-B test Spearman (train: STS-B + MRPC pairs)", "sts.main_score"),
               Column("answer selection MRR / MAP (train: its pairs)", "qa", lambda q: f"{fmt(q['mrr'])} / {fmt(q['map'])}")]
    return benchmark_table(rows, columns, QUEUE_QUALITY_LABELS)


table_cli_startup = Table("cli_startup:results", [
    Column("command", "command", "`{}`"), Column("median", "median_s", "{:.2f} s"),
    Column("range", "", lambda r: f"{r['min_s']:.2f}-{r['max_s']:.2f} s"), Column("runs", "runs", "{}")], labels=None)

TABLES: dict[str, Callable[..., str]] = {
    name.removeprefix("table_"): function for name, function in globals().items() if name.startswith("table_")
}


# ---------------------------------------------------------------- templates

PLACEHOLDER = re.compile(r"\{\{\s*(table|link|v|d)\s+([^}]*?)\s*\}\}")


def render_template(text: str, results: Results) -> str:
    """Fill ``{{table NAME}}``, ``{{link FILE}}``, ``{{v FILE PATH[|FORMAT]}}`` and ``{{d FILE PATH FILE PATH[|FORMAT]}}``."""

    def replace(match: re.Match) -> str:
        kind, argument = match.group(1), match.group(2)
        argument, _, spec = argument.partition("|")
        words = argument.split()
        if kind == "table":
            if words[0] not in TABLES:
                raise ValueError(f"template: unknown table {words[0]!r}; known: {', '.join(sorted(TABLES))}")
            return TABLES[words[0]](results, *words[1:])
        if kind == "link":
            if not results.has(words[0]):
                raise ValueError(f"template: eval/results/{words[0]}.json does not exist")
            return link(words[0])
        if kind == "v":
            return fmt(lookup(results[words[0]], words[1]), spec or ".2f")
        difference = mean_of(lookup(results[words[0]], words[1])) - mean_of(lookup(results[words[2]], words[3]))
        return f"{difference:+{spec or '.2f'}}"

    return PLACEHOLDER.sub(replace, text)


def render_results_page(template: str, results: Results) -> str:
    name = Path(template).name
    text = (TEMPLATES / template).read_text(encoding="utf-8")
    return GENERATED.format(source="eval/results/*.json", edit=f"docs/templates/{name}") + render_template(text, results)


# ---------------------------------------------------------------- all pages


def render_all(root: Path = ROOT) -> dict[Path, str]:
    """Every generated page: path -> the text it should hold now."""
    results = Results(root / "eval" / "results")
    pages = {root / "docs" / "results.md": render_results_page("results.md.in", results),
             root / "docs" / "results_archive.md": render_results_page("results_archive.md.in", results)}
    specs = builtin_specs()
    for spec, doc in specs:
        pages[root / "data" / f"{spec.name}.md"] = data_card(spec, doc)
    pages[root / "data" / "README.md"] = data_index([spec for spec, _ in specs])
    template = TEMPLATES / "README.md.in"  # the README's prose, its figures as template values
    text = GENERATED.format(source="eval/results/*.json", edit="docs/templates/README.md.in") + render_template(
        template.read_text(encoding="utf-8"), results)
    pages[root / "README.md"] = render_readme(text, results)
    pages.update(render_recipes(results, root / "scripts" / "recipes"))  # the recipes' comments (scripts/render_recipes.py)
    return pages


def stale_pages(root: Path = ROOT) -> list[Path]:
    """The generated pages whose file differs from what would be rendered now."""
    return [path for path, text in render_all(root).items()
            if not path.is_file() or path.read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is out of date")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_pages()
        for path in stale:
            print(f"out of date: {path.relative_to(ROOT)} (run: python scripts/render_docs.py)")
        return 1 if stale else 0
    for path, text in render_all().items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
