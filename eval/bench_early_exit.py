"""Early exit from the classifier a user would ship: accuracy lost and speed gained on Banking77 and
emotion, 3 seeds of the exits, against a fixed truncation trained by sentence-transformers'
AdaptiveLayerLoss (CPU, one torch thread; issue 28).

Models, per data set (``scripts/recipes/<data set>_multi_exit.yaml``):

- **Stage 1** (once, shared by the seeds): the recipe's stage 1, which is the data set's dev-chosen
  classifier recipe field for field (``banking77_acl.yaml``: CE, 3 epochs, lr 1e-4;
  ``emotion_acl.yaml``: ACL-Embed with encoded label names; ``tests/test_multi_exit_recipes.py``).
  Its test accuracy is compared with the classifier recipe's in ``acl_quality.json`` (Banking77: the
  same training rows; emotion: the verdict trained on a 3,000-row sample, the recipe on all 16,000).
- **Stage 2** (``--seeds``, default 0 1 2): the recipe's stage 2 (ACL-CL MHA exits on layers 2-5,
  backbone frozen) from that stage-1 model with each seed.
- **Fixed truncation**: the bundled model trained with ``AdaptiveLayerLoss`` wrapped around the
  stage-1 objective (``contrastive_bert.losses.adaptive_layer_baseline``: the same ``ACLEmbedLoss``
  options, learning rates, epochs, length and seed), then cut to d layers and answered by its own
  label head on layer d's pooled embedding (the head every layer was trained against). Emotion's
  objective cannot be wrapped as it is: AdaptiveLayerLoss routes the encoded label names through its
  layer cache (``KeyError: 'all_layer_embeddings'``; in the caching pass the names would also join
  the KL batch), so its AdaptiveLayerLoss model trains ACL-Embed with *free* label vectors at the
  same lambda 0.5 / tau 0.1 (the closest objective it can wrap; recorded in ``protocol``).

Protocol per stage-2 seed: every head's probabilities on dev and test in one pass, every criterion
and threshold answered from them (``simulated_sweep``; equal to real early exit row by row); the
setting is chosen on dev by the existing rule (``choose_exit_setting``, through the protocol's
``choose_on_dev``: fewest average layers within 1 point of the full model's dev accuracy). On
test, only the full model and the chosen setting are timed, at batch 32 (rows still running
regrouped across batches) and batch 1, on the CPU clock and the wall clock (``--repeats`` passes,
the fastest kept), tokenisation included; the timed accuracy is the reported one. Per data set:
accuracy loss against the full model, speed-ups and average layers as mean ± std over the seeds.
The truncated model is timed at every depth 1-5 and at full depth; the table row takes the depth
early exit uses on average (rounded) and both neighbours, and the interpolation between the
neighbours (a mix of the two depths at exactly that average cost).
A batch-1 profile of the chosen setting on the first seed's model
(``contrastive_bert.inference.early_exit_profile``, what ``eval/profile_early_exit.py`` prints)
says where the time of one call goes.

Resumable: one run-log record per trained model (``early_exit_classifier_backbone.runs.jsonl``), so
a rerun trains and measures only what is missing; each training run resumes from its last
checkpoint under ``--work-dir``. ``early_exit.json`` is rebuilt after every record, with the
environment block; the numbers measured before issue 28 (on the old 300-step backbone) stay in it
under ``old_300_step_backbone``.

Rounds: a data set's runs belong to the stage-1 recipe they trained, fields and batch order (the
``acl`` loss's class-mixed batches since issue 38; records without a ``batch_order`` were trained in
``group_by_label`` order). When the recipe or its order changes, the next run starts a new round (keys
with ``"round": k``, models in ``--work-dir/NAME-roundK``) and the results keep showing the newest
complete round, flagged ``superseded``, until the new one is complete.

Run (about 2.5 h of CPU on one torch thread, 3-4 h wall while another benchmark shares the 2 cores:
Banking77 ~1 h: stage 1 ~15 min, each stage-2 seed ~8 min, the AdaptiveLayerLoss model ~20 min;
emotion ~1.5 h: 16,000 training rows, stage 1 ~20 min, each seed ~12 min, AdaptiveLayerLoss ~30 min):

    OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false nohup .venv/bin/python eval/bench_early_exit.py > /tmp/bench_early_exit.log 2>&1 &

Smoke run: ``--dry-run`` with a tiny 6-layer model (``CONTRASTIVE_BERT_DEFAULT_MODEL``), ``--output``
and ``--run-log`` outside ``eval/results``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

from contrastive_bert.benchmarking import RunLog, add_common_arguments, mean_std, setup_from_args, write_results

logger = logging.getLogger("bench_early_exit")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "eval" / "results"
RECIPES = ROOT / "scripts" / "recipes"
DATASETS = ("banking77", "emotion")
OLD_KEY = "old_300_step_backbone"
# The settings answered on dev and test (accuracy, average layers): every criterion's default sweep
# plus margin 0.05 (the old dev choice was margin 0.1, the sweep's lowest).
SETTINGS = (
    [("confidence", t) for t in (0.5, 0.7, 0.8, 0.9, 0.95, 0.99)]
    + [("margin", t) for t in (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)]
    + [("patience", t) for t in (2, 3)]
)
BATCH_SIZES = (32, 1)
PROFILE_SENTENCES = 64
DRY_RUN_TRAIN_ROWS = 64
# AdaptiveLayerLoss cannot wrap encoded label names (see the module doc): its closest objective.
ADAPTIVE_OPTIONS = {"label_embedding": "free"}
# A data set's runs belong to the stage-1 recipe they trained (its fields and its loss's batch order): a changed
# recipe starts a new round of runs (keys with "round": k) in a folder of its own, and the results show the
# newest complete round. Fields that do not change what is trained are left out of the comparison.
NOT_TRAINING_FIELDS = ("output_dir", "data_dir", "resume", "overwrite")
OLD_BATCH_ORDER = "group_by_label"  # stage-1 records without "batch_order": trained before the acl loss drew class-mixed batches


# --------------------------------------------------------------------------- pure logic (tested)


def trained_setting(recipe: dict, batch_order: str) -> dict:
    """What a stage-1 recipe trains: its recorded fields (as JSON holds them) but the output and data
    folders, plus the batch order of its loss."""
    fields = json.loads(json.dumps({k: v for k, v in recipe.items() if k not in NOT_TRAINING_FIELDS}))
    return {**fields, "batch_order": batch_order}


def recipe_round(log: RunLog, name: str, current: dict) -> int:
    """The round of ``name``'s runs that trained ``current`` (:func:`trained_setting` of its stage-1 recipe
    now): the round of a stage-1 record trained from it, else one past the last round (0 for a new data set)."""
    rounds: dict[int, dict] = {}
    for record in log.records():
        if record.get("dataset") == name and record.get("part") == "stage1" and "recipe" in record:
            rounds[record.get("round", 0)] = trained_setting(record["recipe"], record.get("batch_order", OLD_BATCH_ORDER))
    same = [k for k, trained in rounds.items() if trained == current]
    return max(same) if same else max(rounds, default=-1) + 1


def part_key(name: str, part: str, round_: int = 0, seed: int | None = None) -> dict:
    """A run's key: data set, part, the seed of a stage-2 run, and the round after the first."""
    key: dict[str, Any] = {"dataset": name, "part": part}
    if seed is not None:
        key["seed"] = seed
    if round_:
        key["round"] = round_
    return key


def round_records(log: RunLog, name: str, round_: int) -> dict[str, Any]:
    """``{"stage1": record | None, "stage2": [records], "adaptive": record | None}`` of one round."""
    mine = [r for r in log.records() if r.get("dataset") == name and r.get("round", 0) == round_]
    return {"stage1": next((r for r in mine if r.get("part") == "stage1"), None),
            "stage2": [r for r in mine if r.get("part") == "stage2"],
            "adaptive": next((r for r in mine if r.get("part") == "adaptive"), None)}


def shown_round(log: RunLog, name: str, current: int, seeds: list[int], adaptive: bool = True) -> int | None:
    """The round whose results are shown: the current one once it is complete (stage 1, every seed and,
    with ``adaptive``, the AdaptiveLayerLoss model) or if no earlier round has a stage-1 run; else the
    newest earlier round with one (its results stand until the current round replaces them)."""
    runs = round_records(log, name, current)
    complete = (runs["stage1"] is not None and {r["seed"] for r in runs["stage2"]} >= set(seeds)
                and (runs["adaptive"] is not None or not adaptive))
    earlier = [k for k in range(current - 1, -1, -1) if round_records(log, name, k)["stage1"] is not None]
    if complete or not earlier:
        return current if runs["stage1"] is not None else None
    return earlier[0]


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(float(value), digits)


def _stat(values: list[float], digits: int = 2) -> dict[str, Any]:
    """mean ± std over seeds, rounded, with the per-seed values."""
    stats = mean_std([float(v) for v in values])
    return {"mean": round(stats["mean"], digits), "std": round(stats["std"], digits), "values": [round(v, digits) for v in values]}


def speedups(timed: dict[str, dict], row: str = "chosen") -> dict[str, dict[str, float]]:
    """``{batch size: {"cpu": x, "wall": x}}``: ``row``'s throughput over the full model's, on
    the CPU clock and the wall clock, per batch size of ``timed`` (``{batch: {"full", row}}``)."""
    out = {}
    for size, part in timed.items():
        full, other = part["full"], part[row]
        out[str(size)] = {"cpu": round(other["cpu_throughput"] / full["cpu_throughput"], 3),
                          "wall": round(other["throughput"] / full["throughput"], 3)}
    return out


def seed_outcome(record: dict) -> dict[str, Any]:
    """One stage-2 seed's test figures at its own dev choice: accuracy, full accuracy, accuracy
    lost (points, full minus early exit), average layers and the speed-ups, from the timed runs
    (the largest batch's pass gives the accuracy: predictions are the same at every batch size)."""
    choice = record["dev_choice"]
    if choice is None:
        return {"seed": record["seed"], "dev_choice": None}
    timed = record["test_timed"]
    reference = timed[str(max(int(size) for size in timed))]
    accuracy, full = reference["chosen"]["accuracy"], reference["full"]["accuracy"]
    return {"seed": record["seed"], "criterion": choice["criterion"], "threshold": choice["threshold"],
            "accuracy": accuracy, "full_accuracy": full, "accuracy_loss": round(full - accuracy, 2),
            "avg_layers": reference["chosen"]["avg_layers"], "speedup": speedups(timed)}


def aggregate_seeds(records: list[dict]) -> dict[str, Any]:
    """Mean ± std over the stage-2 seeds of each seed's own dev-chosen setting (a seed without a
    qualifying setting is listed, not averaged), the per-exit accuracy on dev and test, and whether
    every seed chose the same setting."""
    outcomes = [seed_outcome(r) for r in sorted(records, key=lambda r: r["seed"])]
    chosen = [o for o in outcomes if o.get("criterion") is not None]
    out: dict[str, Any] = {"seeds": [o["seed"] for o in outcomes], "per_seed": outcomes,
                           "seeds_without_a_setting_within_1_point": [o["seed"] for o in outcomes if o.get("criterion") is None]}
    if chosen:
        settings = {(o["criterion"], o["threshold"]) for o in chosen}
        out["same_setting_every_seed"] = len(settings) == 1
        out["test"] = {key: _stat([o[key] for o in chosen], 3 if key == "avg_layers" else 2)
                       for key in ("accuracy", "full_accuracy", "accuracy_loss", "avg_layers")}
        out["test"]["speedup"] = {size: {clock: _stat([o["speedup"][size][clock] for o in chosen])
                                         for clock in ("cpu", "wall")}
                                  for size in chosen[0]["speedup"]}
    for split in ("dev", "test"):
        layers = list(records[0][f"{split}_sweep"]["exits"]) if records else []
        out[f"exit_accuracy_{split}"] = {str(layer): _stat([r[f"{split}_sweep"]["exits"][layer] for r in records])
                                         for layer in layers}
    return out


def truncation_depths(avg_layers: float, max_depth: int) -> dict[str, Any]:
    """The depths a fixed truncation is compared at for an early exit that uses ``avg_layers`` on
    average: the rounded count and both neighbours (floor and ceiling, within 1..max_depth)."""
    if not 0 < avg_layers <= max_depth:
        raise ValueError(f"avg_layers: expected a value in (0, {max_depth}], got {avg_layers!r}")
    low = min(max(1, math.floor(avg_layers)), max_depth)
    high = min(max(1, math.ceil(avg_layers)), max_depth)
    rounded = min(max(1, int(math.floor(avg_layers + 0.5))), max_depth)
    return {"avg_layers": round(avg_layers, 3), "rounded": rounded, "neighbours": sorted({low, high})}


def truncation_row(adaptive: dict, avg_layers: float, reference_accuracy: float | None = None) -> dict[str, Any]:
    """The fixed-truncation rows for early exit's ``avg_layers``: for each depth (rounded and both
    neighbours) the AdaptiveLayerLoss model's test accuracy through its own head, its loss against
    its own full depth (and against ``reference_accuracy``, the multi-exit model's full accuracy),
    the speed-ups at each batch size; plus the accuracy of mixing the two neighbours so that the
    average depth is exactly ``avg_layers`` (linear interpolation: each row goes to one depth)."""
    accuracy = {int(layer): value for layer, value in adaptive["test_exits"].items()}
    full_depth = max(accuracy)
    depths = truncation_depths(avg_layers, full_depth)
    rows = []
    for depth in sorted(set(depths["neighbours"]) | {depths["rounded"]}):
        timed = {size: {"full": part["full"], "depth": part["truncated"][str(depth)]}
                 for size, part in adaptive.get("test_timed", {}).items() if str(depth) in part.get("truncated", {})}
        row = {"depth": depth, "rounded": depth == depths["rounded"], "accuracy": accuracy[depth],
               "loss_vs_own_full": round(accuracy[full_depth] - accuracy[depth], 2)}
        if reference_accuracy is not None:
            row["loss_vs_multi_exit_full"] = round(reference_accuracy - accuracy[depth], 2)
        if timed:
            row["speedup"] = speedups(timed, row="depth")
        rows.append(row)
    low, high = depths["neighbours"][0], depths["neighbours"][-1]
    weight = 0.0 if high == low else (avg_layers - low) / (high - low)
    mixed = (1 - weight) * accuracy[low] + weight * accuracy[high]
    mix: dict[str, Any] = {"depths": [low, high], "share_at_deeper": round(weight, 3), "accuracy": round(mixed, 2),
                           "loss_vs_own_full": round(accuracy[full_depth] - mixed, 2)}
    by_depth = {row["depth"]: row.get("speedup") for row in rows}
    if by_depth.get(low) and by_depth.get(high):  # time per row mixes linearly, so speed-ups mix harmonically
        mix["speedup"] = {size: {clock: round(1.0 / ((1 - weight) / by_depth[low][size][clock] + weight / by_depth[high][size][clock]), 3)
                                 for clock in by_depth[low][size]}
                          for size in by_depth[low] if size in by_depth[high]}
    return {**depths, "full_depth_accuracy": accuracy[full_depth], "rows": rows, "mixed_at_avg_layers": mix}


def reference_accuracy(acl_quality: dict, dataset: str) -> dict[str, Any] | None:
    """The dev-chosen classifier's test accuracy in ``acl_quality.json`` on the most training rows: of the
    data set's ``full`` settings (``emotion/full``, a 3,000-row sample; ``emotion/full16k``, all of train)
    the one whose dev-chosen run trained on the most rows, as the recipes do."""
    candidates = []
    for setting in (acl_quality or {}).get("settings") or {}:
        name, _, kind = setting.partition("/")
        try:
            method = acl_quality["comparisons"][setting]["best_on_dev"]
            entry = acl_quality["settings"][setting][method]
        except (KeyError, TypeError):
            continue
        if name == dataset and kind.startswith("full") and entry.get("test", {}).get("accuracy"):
            candidates.append((entry.get("cost", {}).get("train_rows") or 0, setting, method, entry))
    if not candidates:
        return None
    rows, setting, method, entry = max(candidates, key=lambda candidate: candidate[0])
    accuracy = entry["test"]["accuracy"]
    return {"setting": setting, "method": method, "test_accuracy": _stat(accuracy["values"]), "train_rows": rows or None,
            "seeds": entry.get("seeds")}


def compare_stage1(stage1: dict, reference: dict | None) -> dict[str, Any]:
    """Stage 1's test accuracy against the classifier recipe's: the difference and whether it lies
    within 2 of the reference's seed standard deviations (at least 0.5 points)."""
    out = {"test_accuracy": stage1["test_accuracy"], "dev_accuracy": stage1["dev_accuracy"], "reference": reference}
    if reference is not None:
        mean, std = reference["test_accuracy"]["mean"], reference["test_accuracy"]["std"]
        difference = round(stage1["test_accuracy"] - mean, 2)
        out["difference"] = difference
        out["within_noise"] = abs(difference) <= max(2 * std, 0.5)
    return out


def dataset_table(name: str, stage1: dict, seeds: dict, truncation: dict | None, adaptive: dict | None) -> list[dict]:
    """The rows of one data set's table: full model, early exit (dev-chosen, mean ± std over
    seeds), the multi-exit model's own exit at the rounded depth, and the AdaptiveLayerLoss model
    cut to each compared depth (and mixed at early exit's average depth)."""
    rows: list[dict] = [{"dataset": name, "row": "full model (stage 1 = the classifier recipe)",
                         "test_accuracy": stage1["test_accuracy"], "avg_layers": None, "speedup": None}]
    test = seeds.get("test")
    if test:
        rows.append({"dataset": name, "row": "early exit, dev-chosen setting per seed (mean ± std over stage-2 seeds)",
                     "test_accuracy": test["accuracy"], "accuracy_loss": test["accuracy_loss"],
                     "avg_layers": test["avg_layers"], "speedup": test["speedup"]})
    if truncation is not None:
        rounded = str(truncation["rounded"])
        exit_accuracy = seeds.get("exit_accuracy_test", {}).get(rounded)
        if exit_accuracy is not None:
            rows.append({"dataset": name, "row": f"multi-exit model, its exit on layer {rounded} for every row",
                         "test_accuracy": exit_accuracy, "avg_layers": float(rounded), "speedup": None})
        for row in truncation["rows"]:
            rows.append({"dataset": name, "row": f"AdaptiveLayerLoss model truncated to {row['depth']} layers"
                         + (" (rounded average)" if row["rounded"] else " (neighbour)"),
                         "test_accuracy": row["accuracy"], "accuracy_loss_vs_own_full": row["loss_vs_own_full"],
                         "accuracy_loss_vs_multi_exit_full": row.get("loss_vs_multi_exit_full"),
                         "avg_layers": float(row["depth"]), "speedup": row.get("speedup")})
        mixed = truncation["mixed_at_avg_layers"]
        rows.append({"dataset": name, "row": f"AdaptiveLayerLoss model, depths {mixed['depths']} mixed to "
                     f"{truncation['avg_layers']} layers on average (interpolated)",
                     "test_accuracy": mixed["accuracy"], "accuracy_loss_vs_own_full": mixed["loss_vs_own_full"],
                     "avg_layers": truncation["avg_layers"], "speedup": mixed.get("speedup")})
        if adaptive is not None:
            rows.append({"dataset": name, "row": "AdaptiveLayerLoss model, all layers",
                         "test_accuracy": truncation["full_depth_accuracy"], "avg_layers": None, "speedup": None})
    return rows


def convert_old(existing: dict | None) -> dict | None:
    """The pre-issue-28 results (top-level ``batch_sizes``/``dev_choice``/... of the old single-model
    file) as one block for ``old_300_step_backbone``; a file already converted keeps its block."""
    if not existing:
        return None
    if OLD_KEY in existing:
        return existing[OLD_KEY]
    if "batch_sizes" not in existing:
        return None
    return {**existing, "note": "measured before issue 28 on the old banking77_multi_exit.yaml: stage 1 was 300 "
            "steps of ACL-Embed at lambda 0.02 (in effect CE), 48 tokens, full model 88.67 on test, where the "
            "dev-chosen classifier recipe reaches 93.39; kept as measured (run log: early_exit.runs.jsonl)"}


def assemble(log: RunLog, existing: dict | None, acl_quality: dict | None, setup: dict,
             rounds: dict[str, int] | None = None) -> dict:
    """The results JSON from the run log: per data set the stage-1 comparison, the seeds'
    aggregate, the truncation rows and the table, from the round :func:`shown_round` picks (``rounds``:
    each data set's current round, 0 where not given); the old block kept."""
    datasets: dict[str, Any] = {}
    table: list[dict] = []
    rounds = rounds or {}
    stale: list[str] = []
    for name in DATASETS:
        current = rounds.get(name, 0)
        shown = shown_round(log, name, current, setup.get("seeds") or [], adaptive=not setup.get("no_adaptive"))
        if shown is None:
            continue
        runs = round_records(log, name, shown)
        stage1, records, adaptive = runs["stage1"], runs["stage2"], runs["adaptive"]
        block: dict[str, Any] = {"stage1": compare_stage1(stage1, reference_accuracy(acl_quality or {}, name)),
                                 "stage1_train_seconds": stage1.get("train_seconds"), "round": shown,
                                 "stage1_batch_order": stage1.get("batch_order", OLD_BATCH_ORDER)}
        if shown != current:
            stale.append(name)
            block["superseded"] = (f"trained from an earlier stage-1 recipe or batch order (round {shown}); round {current}, "
                                   "from the recipe as it is now, replaces this block once complete")
        seeds = aggregate_seeds(records) if records else {}
        block["early_exit"] = seeds
        block["dev_choices"] = [{"seed": r["seed"], **(r["dev_choice"] or {})} for r in sorted(records, key=lambda r: r["seed"])]
        truncation = None
        if adaptive is not None:
            block["adaptive_layer"] = {k: adaptive[k] for k in ("objective", "test_exits", "dev_exits", "test_timed", "train_seconds")
                                       if k in adaptive}
            if seeds.get("test"):
                truncation = truncation_row(adaptive, seeds["test"]["avg_layers"]["mean"], stage1["test_accuracy"])
                block["fixed_truncation"] = truncation
        profile = next((r.get("batch1_profile") for r in sorted(records, key=lambda r: r["seed"]) if r.get("batch1_profile")), None)
        if profile:
            block["batch1_profile"] = profile
        block["table"] = dataset_table(name, stage1, seeds, truncation, adaptive)
        table += block["table"]
        datasets[name] = block
    pending = [name for name in DATASETS if name not in datasets or not datasets[name]["early_exit"].get("test")
               or "fixed_truncation" not in datasets[name] or name in stale]
    out = {"protocol": PROTOCOL, "setup": setup, "pending": pending, "datasets": datasets, "table": table}
    old = convert_old(existing)
    if old is not None:
        out[OLD_KEY] = old
    return out


PROTOCOL = {
    "question": "how much faster can the dev-chosen classifier answer for at most a point of accuracy (issue 28)",
    "stage1": "the multi-exit recipe's stage 1 = the classifier recipe (banking77_acl.yaml, emotion_acl.yaml), trained once",
    "stage2": "ACL-CL MHA exits on layers 2-5 of the frozen stage-1 backbone, 3 epochs, one run per seed",
    "dev_rule": "fewest average layers whose dev accuracy is within 1 point of the full model's (choose_on_dev)",
    "settings": [f"{c} {t}" for c, t in SETTINGS],
    "timing": "test split, full model and the dev-chosen setting, batch 32 (regrouped) and batch 1, tokenisation "
              "included, one torch thread; cpu = sentences per CPU-second of the process, wall = sentences per second; "
              "the fastest of --repeats passes",
    "fixed_truncation": "the bundled model trained with sentence-transformers' AdaptiveLayerLoss around the stage-1 "
                        "objective (ACLEmbedLoss, same options, learning rates, epochs, length, seed; n_layers_per_step 1, "
                        "kl_temperature 0.3), cut to d layers and answered by its own label head on layer d's pooled "
                        "embedding; d = early exit's mean average layers on test, rounded, and both neighbours",
    "adaptive_objective_emotion": "ACL-Embed with free label vectors (lambda 0.5, tau 0.1): AdaptiveLayerLoss cannot wrap "
                                  "encoded label names (their features pass through its layer cache: KeyError "
                                  "'all_layer_embeddings')",
    "stage1_reference": "acl_quality.json's dev-chosen method on the most training rows it measured (emotion: "
                        "emotion/full16k, all 16,000 rows, as in the recipe; no longer the 3,000-row sample)",
}


# --------------------------------------------------------------------------- training and measuring


def work_folder(name: str, args: argparse.Namespace) -> Path:
    """The data set's models under ``--work-dir``: ``NAME/`` for its first round, ``NAME-roundK/`` after."""
    round_ = getattr(args, "rounds", {}).get(name, 0)
    return Path(args.work_dir) / (name if not round_ else f"{name}-round{round_}")


def batch_order_of(loss: str) -> str:
    """The batch order the training loop gives ``loss``: a sentence-transformers sampler name, or the name
    of the package's sampler factory (``class_mixed_batches`` for ``acl`` and ``cross_layer``)."""
    from contrastive_bert.training.losses_registry import get_loss_entry

    sampler = get_loss_entry(loss).batch_sampler
    return sampler if isinstance(sampler, str) else sampler.__name__


def current_setting(name: str, args: argparse.Namespace) -> dict:
    """:func:`trained_setting` of the data set's stage-1 recipe as it is now."""
    stage1, _ = recipes_for(name, args)
    return trained_setting(stage1.recorded(), batch_order_of(stage1.loss))


def recipes_for(name: str, args: argparse.Namespace) -> tuple[Any, Any]:
    """(stage-1 recipe, stage-2 recipe template) of the data set's multi-exit recipe, in its :func:`work_folder`."""
    from contrastive_bert.training.recipe import TrainingRecipe
    from contrastive_bert.training.stages import stage_recipes

    overrides: dict[str, Any] = {"output_dir": str(work_folder(name, args)), "data_dir": args.data_dir}
    if args.dry_run:
        overrides["max_train_samples"] = DRY_RUN_TRAIN_ROWS
    multi = TrainingRecipe.from_file(RECIPES / f"{name}_multi_exit.yaml", overrides)
    if args.max_steps:
        multi.stages = [{**stage, "max_steps": args.max_steps} for stage in multi.stages]
    if args.eval_rows:
        multi.max_eval_samples = args.eval_rows
        multi.stages = [{**stage, "max_eval_samples": args.eval_rows} for stage in multi.stages]
    first, second = stage_recipes(multi)
    return first, second


def train_or_resume(recipe) -> float:
    """Train ``recipe`` unless its ``final/`` exists; continue from its last checkpoint if any.
    Returns the training seconds (0 when it was done already)."""
    import dataclasses

    from contrastive_bert.training.output_dir import CHECKPOINTS, FINAL_MODEL, last_checkpoint
    from contrastive_bert.training.runner import train

    folder = Path(recipe.output_dir)
    if (folder / FINAL_MODEL / "modules.json").is_file():
        return 0.0
    resume = last_checkpoint(folder / CHECKPOINTS) is not None
    recipe = dataclasses.replace(recipe, resume=resume, overwrite=not resume)
    outcome = train(recipe)
    return float(outcome.train_seconds)


def split_rows(name: str, args: argparse.Namespace) -> dict[str, tuple[list[str], list[int]]]:
    """Texts and labels of the dev (the package's validation split) and test splits."""
    from contrastive_bert.data import load_dataset

    data = load_dataset(name, data_dir=args.data_dir)
    out = {}
    for split, key in (("dev", "validation"), ("test", "test")):
        part = data[key] if args.eval_rows is None else data[key].select(range(min(args.eval_rows, len(data[key]))))
        out[split] = (list(part["text"]), list(part["label"]))
    return out


def head_accuracy(model, texts: list[str], labels: list[int]) -> float:
    """Test accuracy (percent) of a stage-1 model's label head on its sentence embeddings."""
    import numpy as np
    import torch

    from contrastive_bert.heads.label_embedding import find_label_head

    head = find_label_head(model)
    with torch.inference_mode():
        embeddings = model.encode(texts, batch_size=64, convert_to_tensor=True, show_progress_bar=False)
        predicted = head.logits(embeddings.to(head.weight.device).float()).argmax(dim=1).cpu().numpy()
    return round(float((predicted == np.asarray(labels)).mean() * 100.0), 2)


def timed_runs(model, texts, labels, args, settings=(), depths=()) -> dict[str, dict]:
    """Per batch size: the full model and each setting / truncated depth, timed (``sweep_thresholds``)."""
    from contrastive_bert.inference.early_exit import sweep_thresholds

    sweep_thresholds(model, texts[:32], labels[:32], list(settings)[:1], batch_size=32, truncated_depths=list(depths)[:1])  # warm-up
    out = {}
    for size in BATCH_SIZES:
        measured = sweep_thresholds(model, texts, labels, list(settings), batch_size=size, truncated_depths=list(depths),
                                    repeats=args.repeats)
        part: dict[str, Any] = {"full": measured["full"]}
        if settings:
            part["chosen"] = measured["sweep"][0]
        if depths:
            part["truncated"] = {str(row["depth"]): row for row in measured["truncated"]}
        out[str(size)] = part
    return out


def run_stage1(name: str, args: argparse.Namespace, rows: dict) -> dict:
    from contrastive_bert.models import load_model

    stage1, _ = recipes_for(name, args)
    seconds = train_or_resume(stage1)
    model = load_model(str(Path(stage1.output_dir) / "final"), device=args.device)
    return {"dataset": name, "part": "stage1", "model": str(Path(stage1.output_dir) / "final"), "train_seconds": round(seconds, 1),
            "dev_accuracy": head_accuracy(model, *rows["dev"]), "test_accuracy": head_accuracy(model, *rows["test"]),
            "max_seq_length": model.max_seq_length, "recipe": stage1.recorded(), "batch_order": batch_order_of(stage1.loss)}


def run_stage2(name: str, seed: int, args: argparse.Namespace, rows: dict, profile: bool) -> dict:
    import dataclasses

    from contrastive_bert.heads.exits import load_multi_exit_model
    from contrastive_bert.inference.early_exit import choose_exit_setting, exit_probabilities, simulated_sweep

    stage1, stage2 = recipes_for(name, args)
    recipe = dataclasses.replace(stage2, seed=seed, output_dir=str(work_folder(name, args) / f"stage-2-seed{seed}"),
                                 model=str(Path(stage1.output_dir) / "final"))
    seconds = train_or_resume(recipe)
    model = load_multi_exit_model(str(Path(recipe.output_dir) / "final"), device=args.device)
    sweeps = {split: simulated_sweep(exit_probabilities(model, texts), labels, SETTINGS) for split, (texts, labels) in rows.items()}
    choice = choose_exit_setting(sweeps["dev"])
    record: dict[str, Any] = {"dataset": name, "part": "stage2", "seed": seed, "model": str(Path(recipe.output_dir) / "final"),
                              "train_seconds": round(seconds, 1), "dev_sweep": sweeps["dev"], "test_sweep": sweeps["test"],
                              "dev_choice": choice}
    if choice is not None:
        setting = (choice["criterion"], choice["threshold"])
        record["test_timed"] = timed_runs(model, *rows["test"], args, settings=[setting])
        simulated = next(s for s in sweeps["test"]["sweep"] if (s["criterion"], s["threshold"]) == setting)
        record["timed_vs_simulated_accuracy"] = round(record["test_timed"]["32"]["chosen"]["accuracy"] - simulated["accuracy"], 2)
        if profile:
            from contrastive_bert.inference.early_exit_profile import profile as profile_batch1

            record["batch1_profile"] = profile_batch1(model, rows["test"][0][:PROFILE_SENTENCES], *setting)
    return record


def run_adaptive(name: str, args: argparse.Namespace, rows: dict, batch_order: str) -> dict:
    """The bundled model trained with AdaptiveLayerLoss around stage 1's objective, in the batch order
    stage 1 trained in; every depth's accuracy through its own head (dev, test) and the timings at every depth."""
    from contrastive_bert.heads.exits import add_exit_heads, tie_exits_to_label_head
    from contrastive_bert.heads.label_embedding import find_label_head
    from contrastive_bert.inference.early_exit import exit_probabilities, simulated_sweep
    from contrastive_bert.losses import adaptive_layer_baseline
    from contrastive_bert.losses.acl_embed import dataset_label_names
    from contrastive_bert.models import load_model
    from contrastive_bert.training.output_dir import CHECKPOINTS, FINAL_MODEL, last_checkpoint
    from contrastive_bert.training.losses_registry import get_loss_entry
    from contrastive_bert.training.runner import fit
    from contrastive_bert.training.train_data import build_train_dataset

    stage1, _ = recipes_for(name, args)
    folder = work_folder(name, args) / "adaptive-layer"
    options = dict(stage1.loss_options)
    if options.get("label_embedding") == "encoded":
        options.update(ADAPTIVE_OPTIONS)
    objective = {"loss": "AdaptiveLayerLoss(ACLEmbedLoss)", "acl_options": options, "n_layers_per_step": 1,
                 "kl_temperature": 0.3, "epochs": stage1.epochs, "learning_rate": stage1.learning_rate,
                 "head_learning_rate": stage1.head_learning_rate, "seed": stage1.seed, "max_seq_length": stage1.max_seq_length}
    seconds = 0.0
    if not (folder / FINAL_MODEL / "modules.json").is_file():
        import torch

        torch.manual_seed(stage1.seed)
        train = build_train_dataset(stage1.datasets, "labelled", data_dir=stage1.data_dir, max_samples=stage1.max_train_samples,
                                    seed=stage1.seed)
        model = load_model(stage1.model, device=args.device)
        model.max_seq_length = stage1.max_seq_length
        loss = adaptive_layer_baseline(model, dataset_label_names(train), **options)
        start = time.perf_counter()
        # the batch order stage 1 trained in (group_by_label before the acl loss drew class-mixed batches)
        sampler = OLD_BATCH_ORDER if batch_order == OLD_BATCH_ORDER else get_loss_entry(stage1.loss).batch_sampler
        fit(model, train, loss, stage1, str(folder / CHECKPOINTS), batch_sampler=sampler,
            resume_from_checkpoint=last_checkpoint(folder / CHECKPOINTS))
        seconds = time.perf_counter() - start
        model.save(str(folder / FINAL_MODEL))
    model = load_model(str(folder / FINAL_MODEL), device=args.device)
    head = find_label_head(model)
    heads = add_exit_heads(model, head.label_names, head_type="linear")
    tie_exits_to_label_head(heads, head)
    record: dict[str, Any] = {"dataset": name, "part": "adaptive", "seed": stage1.seed, "model": str(folder / FINAL_MODEL),
                              "objective": {**objective, "batch_order": batch_order}, "train_seconds": round(seconds, 1)}
    for split, (texts, labels) in rows.items():
        record[f"{split}_exits"] = {str(k): v for k, v in simulated_sweep(exit_probabilities(model, texts), labels, [])["exits"].items()}
    record["test_timed"] = timed_runs(model, *rows["test"], args, depths=heads.exit_layers)
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated, in this order")
    parser.add_argument("--work-dir", default="output/bench_early_exit", help="the trained models (one folder per data set)")
    parser.add_argument("--repeats", type=int, default=2, help="timed passes per measured row (the fastest is kept)")
    parser.add_argument("--no-adaptive", action="store_true", help="skip the AdaptiveLayerLoss model")
    add_common_arguments(parser, output=RESULTS / "early_exit.json", run_log=RESULTS / "early_exit_classifier_backbone.runs.jsonl",
                         seeds=[0, 1, 2])
    args = parser.parse_args(argv)
    setup_from_args(args)
    committed = {(RESULTS / "early_exit.json").resolve(), (RESULTS / "early_exit_classifier_backbone.runs.jsonl").resolve()}
    if args.dry_run and {Path(args.output).resolve(), Path(args.run_log).resolve()} & committed:
        raise SystemExit("--dry-run: give --output and --run-log outside the committed results (its numbers are meaningless)")
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    unknown = [n for n in names if n not in DATASETS]
    if unknown:
        raise SystemExit(f"--datasets: unknown {unknown}; expected names among {list(DATASETS)}")
    log = RunLog(args.run_log)
    acl_path = RESULTS / "acl_quality.json"
    acl_quality = json.loads(acl_path.read_text()) if acl_path.is_file() else None
    import torch

    setup = {"seeds": args.seeds, "repeats": args.repeats, "threads": torch.get_num_threads(), "dry_run": args.dry_run,
             "eval_rows": args.eval_rows, "max_steps": args.max_steps, "work_dir": args.work_dir}

    # each data set's round: the runs of its stage-1 recipe as it is now (a new round if it changed)
    args.rounds = {name: recipe_round(log, name, current_setting(name, args)) for name in DATASETS}
    setup["no_adaptive"] = args.no_adaptive

    def write() -> None:
        output = Path(args.output)
        existing = json.loads(output.read_text()) if output.is_file() else None
        result = assemble(log, existing, acl_quality, setup, args.rounds)
        result["setup"]["seconds"] = round(sum(r.get("seconds", 0.0) for r in log.records()), 1)
        write_results(output, result, device=args.device)

    if args.summary_only:
        write()
        return
    for name in names:
        rows = split_rows(name, args)
        round_ = args.rounds[name]
        if round_:
            logger.info("%s: its stage-1 recipe or batch order changed since its logged runs: round %d, in %s",
                        name, round_, work_folder(name, args))

        def stage1_order(name: str = name, round_: int = round_) -> str:
            stage1 = log.get(part_key(name, "stage1", round_)) or {}
            return stage1.get("batch_order", OLD_BATCH_ORDER)

        plan: list[tuple[dict, Any]] = [(part_key(name, "stage1", round_), lambda: run_stage1(name, args, rows))]
        for index, seed in enumerate(args.seeds):
            plan.append((part_key(name, "stage2", round_, seed),
                         lambda seed=seed, index=index: run_stage2(name, seed, args, rows, profile=index == 0)))
        if not args.no_adaptive:
            plan.append((part_key(name, "adaptive", round_), lambda: run_adaptive(name, args, rows, stage1_order())))
        for key, run in plan:
            if log.done(key):
                continue
            kind = f"{name}:{key['part']}"
            if not args.budget.allows(kind):
                logger.info("%s: not started, --max-minutes would be exceeded; rerun to continue", key)
                write()
                return
            start = time.time()
            record = run()
            seconds = round(time.time() - start, 1)
            args.budget.record(kind, seconds)
            log.append(key, {**record, **({"round": round_} if round_ else {}), "seconds": seconds, "dry_run": args.dry_run})
            logger.info("%s done in %.0f s", key, seconds)
            write()
    write()
    result = json.loads(Path(args.output).read_text())
    print(json.dumps({"pending": result["pending"], "table": result["table"]}, indent=1))


if __name__ == "__main__":
    main()
