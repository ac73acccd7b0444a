"""Run training inside ``SentenceTransformerTrainer``: ``fit`` for any model/data/loss (used by
the benchmarks), ``train`` for a whole recipe (used by ``contrastive-bert train``).

Under a launcher (``torchrun``, ``accelerate launch``) every process runs ``train``; the work
around training that writes files or evaluates runs in the main process only
(:mod:`contrastive_bert.training.processes`)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from contrastive_bert.training.checks import check_run_inputs, precision_flags
from contrastive_bert.training.losses_registry import get_loss_entry
from contrastive_bert.training.output_dir import (
    CHECKPOINTS,
    FINAL_MODEL,
    MINED_ROWS,
    RESULTS_FILE,
    SCORES_BEFORE_FILE,
    clear_run,
    prepare_output_dir,
    write_json,
)
from contrastive_bert.training.processes import join_processes
from contrastive_bert.training.recipe import RECIPE_FILE, TrainingRecipe

logger = logging.getLogger(__name__)

CORPUS_EMBEDDINGS = "embeddings"  # under mined/: the untrained model's corpus embeddings, while mining and scoring use them


class NothingTrained(ValueError):
    """Training made no optimizer step (no full batch): a ``ValueError``, the CLI's one-line error."""


# Columns the batch samplers never compare (sentence-transformers' label columns, its data set tag).
_NON_TEXT_COLUMNS = ("label", "score", "dataset_name")


@dataclass
class TrainingOutcome:
    """What a recipe run produced: the trained model, scores before/after, and the log history;
    a staged multi-exit run also each exit's test accuracy (``multi_exit``, as in its results.json).
    ``main_process`` False: a process other than the main one of a launched run, which trained
    alongside it but saved, scored and recorded nothing (its ``before``/``after`` are empty)."""

    model: object
    output_dir: str
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)
    log_history: list = field(default_factory=list)
    train_seconds: float = 0.0
    already_finished: bool = False
    main_process: bool = True
    multi_exit: dict = field(default_factory=dict)


def _checkpointing_flags(enabled: bool) -> dict:
    """Non-reentrant activation checkpointing, under the argument name this transformers has
    (``activation_checkpointing`` from v5; ``gradient_checkpointing`` before)."""
    import dataclasses

    from transformers import TrainingArguments

    name = "activation_checkpointing" if "activation_checkpointing" in {f.name for f in dataclasses.fields(TrainingArguments)} else "gradient_checkpointing"
    if not enabled:
        return {name: False}
    return {name: True, f"{name}_kwargs": {"use_reentrant": False}}


def head_parameter_pattern(model) -> str | None:
    """Regex over the loss's parameter names (``model.<i>.…``) for every trainable module on top
    of the encoder (module 0): label heads, exit heads, dense layers. None when there is none."""
    indices = [str(i) for i, module in enumerate(model) if i > 0 and any(p.requires_grad for p in module.parameters())]
    return rf"(^|\.)model\.({'|'.join(indices)})\." if indices else None


def training_arguments(
    recipe: TrainingRecipe,
    output_dir: str,
    batch_sampler: str = "batch_sampler",
    has_evaluator: bool = True,
    head_pattern: str | None = None,
):
    """``SentenceTransformerTrainingArguments`` from a recipe (checkpoints under ``output_dir``).
    With ``recipe.head_learning_rate``, parameters matching ``head_pattern`` get that rate: a
    freshly initialised head needs a far larger step than the pretrained encoder."""
    import torch
    from sentence_transformers import SentenceTransformerTrainingArguments

    rate_mapping = {}
    if recipe.head_learning_rate is not None and head_pattern is not None:
        rate_mapping = {"learning_rate_mapping": {head_pattern: recipe.head_learning_rate}}

    return SentenceTransformerTrainingArguments(
        output_dir=output_dir,
        num_train_epochs=recipe.epochs,
        max_steps=recipe.max_steps,
        per_device_train_batch_size=recipe.batch_size,
        per_device_eval_batch_size=recipe.batch_size,
        learning_rate=recipe.learning_rate,
        warmup_steps=recipe.warmup_ratio,  # a float < 1 is a ratio of the total steps (transformers v5)
        weight_decay=recipe.weight_decay,
        seed=recipe.seed,
        data_seed=recipe.seed,
        gradient_accumulation_steps=recipe.gradient_accumulation_steps,
        max_grad_norm=recipe.max_grad_norm if recipe.max_grad_norm is not None else 0.0,
        eval_strategy="steps" if has_evaluator else "no",
        eval_steps=recipe.eval_steps,
        save_strategy="steps",
        save_steps=recipe.save_steps,
        save_total_limit=recipe.save_total_limit,
        logging_steps=recipe.logging_steps,
        batch_sampler=batch_sampler,
        report_to="none",
        dataloader_drop_last=True,
        dataloader_pin_memory=torch.cuda.is_available(),
        **precision_flags(recipe.mixed_precision),
        **_checkpointing_flags(recipe.gradient_checkpointing),
        **rate_mapping,
    )


def loss_callbacks(loss, resume_from_checkpoint: str | None = None) -> list:
    """Trainer callbacks a loss needs: its queue saved into every checkpoint and restored on
    resume (the ST trainer saves only the model), plus whatever the loss asks for through a
    ``trainer_callbacks()`` method (e.g. gradient-angle logging)."""
    from contrastive_bert.training.queue_checkpoint import queue_callbacks

    callbacks = queue_callbacks(loss, resume_from_checkpoint)
    if hasattr(loss, "trainer_callbacks"):
        callbacks += list(loss.trainer_callbacks())
    return callbacks


def planned_steps(trainer) -> int:
    """The optimizer steps ``trainer.train()`` runs to, as transformers counts them: ``max_steps`` when set,
    else the epochs times the optimizer steps an epoch (the last one of an epoch may hold fewer batches)."""
    args = trainer.args
    if args.max_steps > 0:
        return int(args.max_steps)
    batches = len(trainer.get_train_dataloader())
    per_epoch = max(math.ceil(batches / args.gradient_accumulation_steps), 1)
    return math.ceil(args.num_train_epochs * per_epoch)


def checkpoint_holds_last_step(trainer, checkpoint: str) -> bool:
    """Whether ``checkpoint`` was saved at (or after) the run's last optimizer step: a run stopped after it,
    while being scored or saved, has nothing left to train."""
    state = json.loads((Path(checkpoint) / "trainer_state.json").read_text(encoding="utf-8"))
    return int(state.get("global_step", 0)) >= planned_steps(trainer)


def fit(
    model,
    train_dataset,
    loss,
    recipe: TrainingRecipe,
    output_dir: str,
    evaluator=None,
    callbacks: list | None = None,
    batch_sampler: str = "batch_sampler",
    resume_from_checkpoint: str | None = None,
):
    """Train ``model`` on ``train_dataset`` with ``loss`` for the recipe's steps; returns the trainer.
    A non-finite gradient norm or loss stops training there and raises :class:`TrainingDiverged`."""
    from sentence_transformers import SentenceTransformerTrainer

    from contrastive_bert.training.divergence import NonFiniteCallback
    from contrastive_bert.training.freezing import freeze_layers

    if recipe.max_seq_length is not None:
        model.max_seq_length = recipe.max_seq_length
    if recipe.freeze_layers or recipe.freeze_embeddings:
        freeze_layers(model, recipe.freeze_layers, freeze_embeddings=recipe.freeze_embeddings or recipe.freeze_layers > 0)
    args = training_arguments(
        recipe, output_dir, batch_sampler=batch_sampler, has_evaluator=evaluator is not None,
        head_pattern=head_parameter_pattern(model),
    )
    guard = NonFiniteCallback(output_dir)
    callbacks = list(callbacks or []) + loss_callbacks(loss, resume_from_checkpoint) + [guard]
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=train_dataset, loss=loss, evaluator=evaluator, callbacks=callbacks
    )
    if resume_from_checkpoint is not None and checkpoint_holds_last_step(trainer, resume_from_checkpoint):
        # transformers would train one step more: resuming mid-epoch, it checks the step count only after a step
        from transformers import TrainerState

        logger.info("resume: %s holds the last step; nothing left to train", resume_from_checkpoint)
        trainer._load_from_checkpoint(resume_from_checkpoint)
        trainer.state = TrainerState.load_from_json(str(Path(resume_from_checkpoint) / "trainer_state.json"))
    else:
        trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    # Under mixed precision accelerate wraps model.forward in autocast and the trainer leaves it there:
    # restore the plain forward, so what this process encodes next (the after scores) runs in fp32.
    trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)
    if guard.failed:
        raise guard.error()
    if trainer.state.global_step == 0:
        raise NothingTrained(no_step_message(train_dataset, recipe, batch_sampler))
    return trainer


def no_step_message(train_dataset, recipe: TrainingRecipe, batch_sampler: str) -> str:
    """Why a run made 0 optimizer steps and what to change, in one line."""
    rows, size = len(train_dataset), recipe.batch_size
    why = (" (this loss's no-duplicates batch sampler never puts one text twice in a batch: the rows hold too few "
           "distinct texts for one batch)" if batch_sampler == "no_duplicates" else "")
    accumulation = (f" x {recipe.gradient_accumulation_steps} (--gradient-accumulation-steps)"
                    if recipe.gradient_accumulation_steps > 1 else "")
    return (f"batch_size: training made 0 optimizer steps: {rows} training rows gave no full batch of {size} "
            f"(--batch-size){accumulation}{why}; nothing was trained and no model saved; lower --batch-size or add data")


def check_recipe(recipe: TrainingRecipe):
    """Every check that needs no model and loads no data: recipe fields, the recorded recipe on
    resume, the model path, the loss and its options, data sets and their formats, tasks
    (:func:`~contrastive_bert.training.checks.check_run_inputs`), the output folder, and last (it
    may ask the hub) that a hub model can be had. Writes nothing. Returns
    ``(loss_entry, checkpoint_to_resume)``. The cheapest checks run first."""
    from contrastive_bert.models import check_hub_model, check_model_name

    recipe.validate()
    _check_resume_overrides(recipe)
    check_model_name(recipe.model)
    entry = check_run_inputs(recipe)
    checkpoint = prepare_output_dir(recipe.output_dir, overwrite=recipe.overwrite, resume=recipe.resume)
    check_hub_model(recipe.model)
    return entry, checkpoint


def _check_resume_overrides(recipe: TrainingRecipe) -> None:
    """On resume, the fields that differ from the run recorded in ``recipe.output_dir``: logged
    when they may change, a ``ValueError`` naming the first that may not."""
    if recipe.resume and (Path(recipe.output_dir) / RECIPE_FILE).is_file():
        for name, (was, now) in recipe.resume_overrides(TrainingRecipe.load_recorded(recipe.output_dir)).items():
            logger.info("resume: %s changed from %r to %r", name, was, now)


def recorded_scores_before(recipe: TrainingRecipe) -> dict | None:
    """On ``--resume``, the untrained model's scores the interrupted run wrote (``scores_before.json``),
    stopped before or after its first checkpoint: the same model on the same rows, so not scored again
    (scoring a retrieval corpus costs minutes). None when there are none, or when the run now scores
    other rows (``max_eval_samples`` changed): then before and after are both scored on the new rows."""
    output_dir = Path(recipe.output_dir)
    before_file = output_dir / SCORES_BEFORE_FILE
    if not (recipe.resume and before_file.is_file() and (output_dir / RECIPE_FILE).is_file()):
        return None
    recorded = TrainingRecipe.load_recorded(output_dir)
    if recorded.max_eval_samples != recipe.max_eval_samples:
        logger.info("resume: max_eval_samples changed from %r to %r: the untrained model is scored again on those rows",
                    recorded.max_eval_samples, recipe.max_eval_samples)
        return None
    return json.loads(before_file.read_text())


def check_enough_rows(train_dataset, recipe: TrainingRecipe, batch_sampler: str = "batch_sampler") -> None:
    """A training set smaller than one batch trains 0 steps (the last partial batch is dropped):
    refuse it before training, naming the data, its rows and the batch size. With the
    ``no_duplicates`` sampler (MNRL and the other in-batch losses) a batch also needs that many
    rows with no text in common, so a column with fewer distinct texts than one batch is refused too."""
    rows, needed = len(train_dataset), recipe.batch_size
    cut = f", cut by --max-train-samples {recipe.max_train_samples}" if recipe.max_train_samples is not None else ""
    if rows < needed:
        raise ValueError(
            f"datasets: {', '.join(recipe.datasets)} gives {rows} training rows{cut}, fewer than one batch of "
            f"{needed} (--batch-size): nothing would be trained; add rows or lower --batch-size"
        )
    if batch_sampler != "no_duplicates":
        return
    distinct, column = fewest_distinct_texts(train_dataset)
    if distinct < needed:
        raise ValueError(
            f"datasets: {', '.join(recipe.datasets)} gives {rows} training rows{cut}{',' if cut else ''} but only {distinct} distinct "
            f"{column!r} texts, too few distinct texts for one batch of {needed} (--batch-size): this loss's "
            f"no-duplicates batch sampler never puts one text twice in a batch, so nothing would be trained; "
            f"lower --batch-size (to {distinct} at most) or add data with more distinct texts"
        )


def fewest_distinct_texts(train_dataset) -> tuple[int, str]:
    """``(count, column)``: the text column with the fewest distinct values. No batch of the
    no-duplicates sampler holds more rows than that (two rows sharing a text never meet)."""
    columns = [c for c in train_dataset.column_names if c not in _NON_TEXT_COLUMNS]
    counts = {column: len({str(value) for value in train_dataset[column]}) for column in columns}
    if not counts:
        return len(train_dataset), ""
    column = min(counts, key=counts.get)
    return counts[column], column


def finished_run(recipe: TrainingRecipe) -> dict | None:
    """The results of a finished run in ``recipe.output_dir`` that ``recipe`` (a resume) would only
    repeat: ``final/`` and ``results.json`` saved with the same ``max_steps`` and ``epochs``. None
    otherwise (a resume that raises ``--max-steps`` or ``--epochs`` trains on)."""
    output_dir = Path(recipe.output_dir)
    results_file = output_dir / RESULTS_FILE
    if not (results_file.is_file() and (output_dir / FINAL_MODEL / "modules.json").is_file()):
        return None
    try:
        results = json.loads(results_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None
    recorded = results.get("recipe", {}) if isinstance(results, dict) else {}
    if recorded.get("max_steps") != recipe.max_steps or float(recorded.get("epochs", -1)) != float(recipe.epochs):
        return None
    return results


def evaluation_data(recipe: TrainingRecipe, run_data=None) -> dict:
    """``{task: data}`` of ``recipe.eval_tasks`` as scored before and after training, each loaded once
    (``run_data``: a :class:`~contrastive_bert.training.train_data.RunData` shared with the rest of the
    run) and sampled to ``max_eval_samples`` rows per split, the same rows before and after; a
    retrieval task keeps its whole corpus and samples its queries
    (:func:`~contrastive_bert.evaluation.tasks.cap_rows`). {} for no tasks or ``max_eval_samples`` 0."""
    from contrastive_bert.evaluation.tasks import cap_rows
    from contrastive_bert.training.train_data import RunData

    if not recipe.eval_tasks or recipe.max_eval_samples == 0:
        return {}
    run_data = run_data if run_data is not None else RunData(recipe.data_dir)
    data = {task: run_data[task] for task in recipe.eval_tasks}
    if recipe.max_eval_samples is not None:
        data = {task: cap_rows(loaded, recipe.max_eval_samples) for task, loaded in data.items()}
    return data


def evaluate_recipe_tasks(model, recipe: TrainingRecipe, data: dict | None = None, embeddings_dir: Path | None = None) -> dict:
    """Scores on ``recipe.eval_tasks`` (test split) of ``data`` (default: :func:`evaluation_data`);
    {} for no tasks or ``max_eval_samples`` 0. ``embeddings_dir``: where ``model``'s corpus
    embeddings are kept (a retrieval task reads them back, or keeps its own there)."""
    from contrastive_bert.evaluation.tasks import evaluate_tasks

    if not recipe.eval_tasks or recipe.max_eval_samples == 0:
        return {}
    data = evaluation_data(recipe) if data is None else data
    return evaluate_tasks(model, recipe.eval_tasks, data_dir=recipe.data_dir, data=data, embeddings_dir=embeddings_dir)


def train(recipe: TrainingRecipe, callbacks: list | None = None) -> TrainingOutcome:
    """Train per ``recipe``: evaluate before, train with checkpoints, save ``<output_dir>/final``,
    evaluate after, and write ``<output_dir>/results.json``. A recipe with ``stages`` runs them in
    order (:mod:`contrastive_bert.training.stages`), every stage checked before the first trains."""
    if recipe.stages:
        from contrastive_bert.training.stages import train_stages

        return TrainingOutcome(**train_stages(recipe, run_stage=_train_stage, callbacks=callbacks))
    entry, checkpoint = check_recipe(recipe)  # before the heavy imports below: bad input fails in a second
    return _train_checked(recipe, entry, checkpoint, callbacks)


def _train_stage(stage: TrainingRecipe, callbacks: list | None = None) -> TrainingOutcome:
    """One stage of a staged recipe, which :func:`~contrastive_bert.training.stages.check_stages`
    checked with the others: the checkpoint its folder holds (``stage.resume``), then the run."""
    _check_resume_overrides(stage)  # against the stage's own record, in its folder
    checkpoint = prepare_output_dir(stage.output_dir, overwrite=stage.overwrite, resume=stage.resume)
    return _train_checked(stage, get_loss_entry(stage.loss), checkpoint, callbacks)


def _train_checked(recipe: TrainingRecipe, entry, checkpoint: str | None, callbacks: list | None) -> TrainingOutcome:
    """:func:`train` after the checks: ``entry`` the loss's registry entry, ``checkpoint`` the one to resume.
    Launched as several processes, the main one clears the folder, records the recipe, mines,
    scores, saves ``final/`` and writes ``results.json``; the others train on the rows it mined."""
    processes = join_processes()
    processes.wait()  # every process has checked the folder before the main one changes it
    if recipe.resume and (results := finished_run(recipe)) is not None:
        logger.info("resume: %s finished already (step %s); nothing to do", recipe.output_dir, results.get("global_step"))
        return TrainingOutcome(None, str(recipe.output_dir), results.get("before", {}), results.get("after", {}),
                               train_seconds=results.get("train_seconds", 0.0), already_finished=True,
                               main_process=processes.main)
    from contrastive_bert.models import load_model
    from contrastive_bert.training.model_card import note_custom_modules
    from contrastive_bert.training.task_evaluator import TaskEvaluator
    from contrastive_bert.training.train_data import RunData, build_train_dataset
    from contrastive_bert.training.training_clock import TrainingClock

    output_dir = Path(recipe.output_dir)
    run_data = RunData(recipe.data_dir)  # each data set read once: training rows, dev evaluator, before/after
    mining = None
    if recipe.corpus_negatives is None:
        train_dataset = build_train_dataset(
            recipe.datasets, entry.data_format, data_dir=recipe.data_dir, min_pair_score=recipe.min_pair_score,
            max_samples=recipe.max_train_samples, seed=recipe.seed, labelled_negatives=recipe.labelled_negatives,
            load=run_data.__getitem__,
        )
        check_enough_rows(train_dataset, recipe, entry.batch_sampler)
    evaluator = TaskEvaluator(recipe.dev_task, data=run_data[recipe.dev_task]) if recipe.dev_task else None
    eval_data = evaluation_data(recipe, run_data) if processes.main else {}  # scored by the main process only
    model = load_model(recipe.model)
    if recipe.max_seq_length is not None:
        model.max_seq_length = recipe.max_seq_length
    elif getattr(model, "max_seq_length", None) is not None:  # the model's full length, recorded as a number
        recipe = dataclasses.replace(recipe, max_seq_length=int(model.max_seq_length))
    callbacks = list(callbacks or [])
    # The untrained model's corpus embeddings (mining's): the before-scores read them back instead of
    # encoding the corpus again (kept on disk by model weights and corpus, so an interrupted encoding
    # resumes); removed once both are done.
    embeddings_dir = output_dir / MINED_ROWS / CORPUS_EMBEDDINGS if recipe.corpus_negatives is not None else None
    recorded_before = recorded_scores_before(recipe) if processes.main else None  # read before recipe.json is rewritten
    with processes.main_first():  # the main process clears, records and mines; then the others read its rows
        if processes.main:
            if recipe.overwrite:  # only now that data and model have loaded
                clear_run(output_dir)
            output_dir.mkdir(parents=True, exist_ok=True)
            write_json(output_dir / RECIPE_FILE, recipe.recorded())  # before mining: an interrupted run can be resumed
        if recipe.corpus_negatives is not None:  # mined by the model about to be trained (and refreshed: ANCE)
            from contrastive_bert.training.corpus_negatives import CorpusNegatives, mine_training_rows

            store = output_dir / MINED_ROWS  # each data set's rows kept once mined, read back by --resume
            if processes.main:
                store.mkdir(exist_ok=True)
            train_dataset, refresh, mining = mine_training_rows(
                model, recipe.datasets, CorpusNegatives.from_field(recipe.corpus_negatives), run_data.__getitem__,
                seed=recipe.seed, max_samples=recipe.max_train_samples, store=store,
                show_progress_bar=logger.isEnabledFor(logging.INFO), embeddings_dir=embeddings_dir,
                mine=processes.main)
    if recipe.corpus_negatives is not None:
        callbacks += refresh
        try:
            check_enough_rows(train_dataset, recipe, entry.batch_sampler)
        except ValueError as error:
            raise ValueError(f"{error} ({output_dir} keeps the recorded recipe and the mined rows: "
                             f"start again there with --overwrite)") from None

    before = {}
    if processes.main:  # the others go on to the trainer, which waits for this one
        if recorded_before is not None:
            before = recorded_before
        else:
            before = evaluate_recipe_tasks(model, recipe, eval_data, embeddings_dir=embeddings_dir)
            write_json(output_dir / SCORES_BEFORE_FILE, before)
        if embeddings_dir is not None:
            shutil.rmtree(embeddings_dir, ignore_errors=True)

    # A loss with parameters of its own (the acl loss's label head, the multi-exit heads) initialises
    # them here, before the trainer seeds: seed first, or one seed gives a different run each time.
    from transformers import set_seed

    set_seed(recipe.seed)
    loss = entry.build(model, train_dataset, recipe)
    clock = TrainingClock(checkpoint)  # the seconds of the parts before a --resume, from its checkpoint
    try:
        trainer = fit(
            model, train_dataset, loss, recipe, str(output_dir / CHECKPOINTS), evaluator=evaluator,
            callbacks=[*callbacks, clock], batch_sampler=entry.batch_sampler, resume_from_checkpoint=checkpoint,
        )
    except NothingTrained as error:
        raise NothingTrained(f"{error} ({output_dir} keeps the recorded recipe: start again there with --overwrite)") from None
    seconds = clock.seconds()
    if not processes.main:  # the main process saves, scores and records the run
        return TrainingOutcome(model, str(output_dir), log_history=trainer.state.log_history, train_seconds=seconds,
                               main_process=False)
    model.save(str(output_dir / FINAL_MODEL))
    note_custom_modules(output_dir / FINAL_MODEL)
    after = evaluate_recipe_tasks(model, recipe, eval_data)
    results = {"recipe": recipe.recorded(), "before": before, "after": after, "train_seconds": seconds,
               "train_rows": len(train_dataset), "global_step": trainer.state.global_step}
    if checkpoint is not None:  # resumed: the seconds its checkpoint carried (None: unknown, train_seconds is this part's)
        results["train_seconds_before_resume"] = clock.carried
    if mining is not None:
        results["corpus_negatives"] = {"mining": mining, "refreshes": [r.history for r in callbacks if hasattr(r, "history")]}
    write_json(output_dir / RESULTS_FILE, results)
    return TrainingOutcome(model, str(output_dir), before, after, trainer.state.log_history, seconds)
