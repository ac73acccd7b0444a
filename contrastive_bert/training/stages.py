"""Multi-stage recipes: ``stages`` is a list of partial recipes run in order in one output folder.

Each stage is the recipe's fields with the stage's on top, trained by
:func:`contrastive_bert.training.runner.train` (so in ``SentenceTransformerTrainer``, with
checkpoints and ``--resume``) into ``<output_dir>/stage-<k>/``; stage k > 1 starts from the
model stage k - 1 saved (``stage-<k-1>/final``). The last stage's model is copied to
``<output_dir>/final`` and one ``<output_dir>/results.json`` holds every stage's results and, for a
multi-exit model, the test accuracy of every exit and an early-exit sweep at the default criterion.

The multi-exit recipe: stage 1 trains the backbone and its final classifier (loss ``acl``),
stage 2 the exit heads with the cross-layer loss (``cross_layer``, backbone frozen).

Resume: a stage with a saved ``final/`` is done and skipped; the first one without continues from
its last checkpoint (or restarts when it saved none).

Launched as several processes (:mod:`contrastive_bert.training.processes`), the main one clears the
folder, records the recipe and, after each stage, saves its ``final/`` and ``results.json`` (the
next stage's model); the others wait for that before each stage, and return empty scores.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contrastive_bert.training.output_dir import (
    CHECKPOINTS,
    FINAL_MODEL,
    RESULTS_FILE,
    clear_run,
    last_checkpoint,
    prepare_output_dir,
    write_json,
)
from contrastive_bert.training.processes import join_processes
from contrastive_bert.training.recipe import RECIPE_FILE, TrainingRecipe

logger = logging.getLogger(__name__)

__all__ = ["check_stages", "stage_recipes", "train_stages"]

# The shuffle that picks --max-eval-samples rows (the same in every run and in early-exit --max-samples).
EVAL_SAMPLE_SEED = 0
# Losses after which the model carries a classifier (label head or exit heads).
CLASSIFIER_LOSSES = ("acl", "cross_layer")
# Fields of the whole run: never set per stage.
RUN_FIELDS = ("stages", "output_dir", "overwrite", "resume")


def stage_folder(output_dir: str | Path, index: int) -> Path:
    """``<output_dir>/stage-<index + 1>``."""
    return Path(output_dir) / f"stage-{index + 1}"


def stage_recipes(recipe: TrainingRecipe) -> list[TrainingRecipe]:
    """One full recipe per stage (base fields, the stage's on top), output in ``stage-<k>``; a
    stage's errors name it (``stages[1].learning_rate: ...``)."""
    base = {k: v for k, v in recipe.to_dict().items() if k not in RUN_FIELDS}
    recipes = []
    for index, stage in enumerate(recipe.stages):
        for name in RUN_FIELDS:
            if name in stage:
                raise ValueError(f"stages[{index}].{name}: set for the whole run, not per stage")
        if index > 0 and "model" in stage:
            raise ValueError(f"stages[{index}].model: a later stage starts from the model of the stage before it")
        values = {**base, **stage, "output_dir": str(stage_folder(recipe.output_dir, index))}
        if index > 0:
            values["model"] = str(stage_folder(recipe.output_dir, index - 1) / FINAL_MODEL)
        try:
            recipes.append(TrainingRecipe.from_dict(values))
        except ValueError as error:
            raise ValueError(f"stages[{index}].{error}") from None
    return recipes


def _model_folder_info(name: str) -> tuple[int | None, bool]:
    """(number of layers, has a classifier) of a local model folder, read from its files; (None,
    False) for a hub id or an unreadable folder."""
    from contrastive_bert.models import resolve_model_name

    path = Path(resolve_model_name(name)).expanduser()
    depth = None
    config = path / "config.json"
    if config.is_file():
        values = json.loads(config.read_text(encoding="utf-8"))
        depth = values.get("num_hidden_layers", values.get("n_layers"))
    modules = path / "modules.json"
    types = [m.get("type", "") for m in json.loads(modules.read_text(encoding="utf-8"))] if modules.is_file() else []
    has_classifier = any(t.endswith(("LabelEmbeddingClassifier", "EncodedLabelClassifier", "MultiExitHeads")) for t in types)
    return (int(depth) if depth is not None else None), has_classifier


def _check_data_reachable(recipe: TrainingRecipe) -> None:
    """Each data set has a local folder or a reachable hub (the loader's one-line error, before
    anything is written)."""
    from contrastive_bert.data import get_dataset
    from contrastive_bert.data.hub import hub_reachable, offline_message
    from contrastive_bert.data.loading import local_folder

    for name in recipe.datasets:
        spec = get_dataset(name)
        if local_folder(spec, recipe.data_dir) is None and spec.hub_id is not None and not hub_reachable():
            raise ValueError(offline_message(spec))


def check_stages(recipe: TrainingRecipe) -> list[TrainingRecipe]:
    """Every check of a staged recipe that needs no model, all before the first stage trains (a
    stage then runs unchecked): each stage's fields, loss and loss options, data sets (reachable),
    tasks and precision (:func:`~contrastive_bert.training.checks.check_run_inputs`), a classifier
    before the cross-layer loss, exit layers against the model's depth, the output folder, and last
    (it may ask the hub) that the first stage's model can be had. Writes nothing. Returns the
    stage recipes."""
    from contrastive_bert.models import check_hub_model, check_model_name
    from contrastive_bert.training.checks import check_run_inputs

    recipe.validate()
    recipes = stage_recipes(recipe)  # each stage's fields validated as its recipe is built
    check_model_name(recipes[0].model)
    depth, has_classifier = _model_folder_info(recipes[0].model)
    for index, stage in enumerate(recipes):
        try:
            check_run_inputs(stage)
            _check_data_reachable(stage)
        except ValueError as error:
            raise ValueError(f"stages[{index}].{error}") from None
        if stage.loss == "cross_layer":
            if not has_classifier:
                before = f"stage {index - 1} trains with {recipes[index - 1].loss!r}" if index else f"model {stage.model!r} has none"
                raise ValueError(
                    f"stages[{index}].loss: 'cross_layer' needs a model with a classifier ({before}); "
                    f"train one in a stage before it with loss 'acl'"
                )
            if depth is not None:
                from contrastive_bert.heads.exits import check_exit_layers

                try:
                    check_exit_layers(stage.loss_options.get("exit_layers"), depth, name="loss_options.exit_layers")
                except ValueError as error:
                    raise ValueError(f"stages[{index}].{error}") from None
        has_classifier = has_classifier or stage.loss in CLASSIFIER_LOSSES
    if recipe.resume:
        if not (Path(recipe.output_dir) / RECIPE_FILE).is_file():
            raise ValueError(f"resume: {recipe.output_dir} holds no staged run to resume")
    else:
        prepare_output_dir(recipe.output_dir, overwrite=recipe.overwrite)
    check_hub_model(recipes[0].model)
    return recipes


def _stage_state(recipe: TrainingRecipe) -> str:
    """``done`` (final/ saved), ``resume`` (a checkpoint to continue), ``restart`` (started, no
    checkpoint) or ``new``."""
    folder = Path(recipe.output_dir)
    if (folder / FINAL_MODEL / "modules.json").is_file():
        return "done"
    if last_checkpoint(folder / CHECKPOINTS) is not None:
        return "resume"
    return "restart" if folder.exists() and any(folder.iterdir()) else "new"


def evaluate_multi_exit(model: Any, recipe: TrainingRecipe) -> dict[str, Any]:
    """Test accuracy of every exit and the early-exit sweep at the default criterion (full model,
    each threshold: accuracy, average layers, throughput) on the test split of the recipe's data set,
    cut to ``recipe.max_eval_samples`` rows (shuffled with seed 0: the rows ``contrastive-bert
    early-exit --sweep --max-samples`` reads) when set."""
    from contrastive_bert.data import load_dataset
    from contrastive_bert.inference.early_exit import default_settings, sweep_thresholds
    from contrastive_bert.inference.exit_criteria import DEFAULT_CRITERION
    from contrastive_bert.training.multi_exit import evaluate_exits

    name = recipe.datasets[0]
    test = load_dataset(name, split="test", data_dir=recipe.data_dir)
    if recipe.max_eval_samples is not None:
        test = test.shuffle(seed=EVAL_SAMPLE_SEED).select(range(min(recipe.max_eval_samples, len(test))))
    texts, labels = list(test["text"]), list(test["label"])
    accuracy = evaluate_exits(model, texts, labels, batch_size=recipe.batch_size)
    last = max(accuracy)
    sweep = sweep_thresholds(model, texts, labels, default_settings([DEFAULT_CRITERION]), batch_size=recipe.batch_size)
    logger.info("per-exit test accuracy on %s: %s", name, accuracy)
    return {
        "dataset": name,
        "split": "test",
        "rows": len(texts),
        "exit_accuracy": {str(layer): value for layer, value in accuracy.items()},
        "final_layer_accuracy": accuracy[last],
        "early_exit": {"criterion": DEFAULT_CRITERION, "batch_size": recipe.batch_size, **sweep},
    }


def train_stages(recipe: TrainingRecipe, run_stage: Callable[..., Any], callbacks: list | None = None) -> dict[str, Any]:
    """Run a staged recipe (see the module doc): :func:`check_stages`, then each stage by
    ``run_stage(stage_recipe, callbacks=...)`` (the runner's, which trains a stage checked here
    without checking it again); returns the fields of the run's ``TrainingOutcome`` (the final
    model, the combined results under ``<output_dir>``)."""
    from contrastive_bert.heads.exits import find_exit_heads
    from contrastive_bert.training.model_card import note_custom_modules

    recipes = check_stages(recipe)
    processes = join_processes()
    processes.wait()  # every process has checked the folder before the main one changes it
    output_dir = Path(recipe.output_dir)
    if recipe.resume and (output_dir / RESULTS_FILE).is_file() and (output_dir / FINAL_MODEL).is_dir() \
            and all(_stage_state(stage) == "done" for stage in recipes):
        results = json.loads((output_dir / RESULTS_FILE).read_text(encoding="utf-8"))
        logger.info("resume: every stage of %s finished already; nothing to do", output_dir)
        stages = results.get("stages") or [{}]
        return {"model": None, "output_dir": str(output_dir), "before": stages[0].get("before", {}),
                "after": stages[-1].get("after", {}), "train_seconds": results.get("train_seconds", 0.0),
                "already_finished": True, "main_process": processes.main}
    if processes.main:
        if recipe.overwrite:
            clear_run(output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        if not recipe.resume:
            write_json(output_dir / RECIPE_FILE, recipe.recorded())
    start = time.perf_counter()
    stage_results, outcome, log_history = [], None, []
    for index, stage in enumerate(recipes):
        processes.wait()  # the main process has saved the stage before (its final/ is this one's model)
        state = _stage_state(stage)
        if state == "done":
            logger.info("stage %d: done already (%s), skipped", index + 1, stage.output_dir)
        else:
            stage.resume, stage.overwrite = state == "resume", state == "restart"
            logger.info("stage %d: %s %s with loss %r", index + 1, "resuming" if stage.resume else "training",
                        stage.output_dir, stage.loss)
            outcome = run_stage(stage, callbacks=callbacks)
            log_history += outcome.log_history
        if processes.main:
            stage_results.append(json.loads((Path(stage.output_dir) / RESULTS_FILE).read_text(encoding="utf-8")))
    if not processes.main:  # the main process copies the model, scores and records the run
        return {"model": outcome.model if outcome is not None else None, "output_dir": str(output_dir),
                "log_history": log_history, "main_process": False}
    final = output_dir / FINAL_MODEL
    if final.exists():
        shutil.rmtree(final)
    shutil.copytree(Path(recipes[-1].output_dir) / FINAL_MODEL, final)
    note_custom_modules(final)
    if outcome is None:  # every stage was done already: the final model for the evaluation
        from contrastive_bert.models import load_model

        model, after = load_model(str(final)), stage_results[-1].get("after", {})
    else:
        model, after = outcome.model, outcome.after
    results: dict[str, Any] = {"recipe": recipe.recorded(), "stages": stage_results,
                               "train_seconds": sum(r.get("train_seconds", 0.0) for r in stage_results)}
    carried = [r["train_seconds_before_resume"] for r in stage_results if "train_seconds_before_resume" in r]
    if carried:  # a stage was resumed: its seconds are whole where its checkpoint carried a clock (None: not)
        results["train_seconds_before_resume"] = None if None in carried else sum(carried)
    if find_exit_heads(model) is not None and recipe.max_eval_samples != 0:
        results["multi_exit"] = evaluate_multi_exit(model, recipes[-1])
    write_json(output_dir / RESULTS_FILE, results)
    logger.info("staged run done in %.0fs: %s", time.perf_counter() - start, output_dir)
    return {"model": model, "output_dir": str(output_dir), "before": stage_results[0].get("before", {}), "after": after,
            "log_history": log_history, "train_seconds": results["train_seconds"], "multi_exit": results.get("multi_exit", {})}
