"""``contrastive-bert train``: run a training recipe (file and/or flags) in SentenceTransformerTrainer.

Every recipe field is a flag; flags override the file. ``--resume`` continues the run recorded in
``<output-dir>/recipe.json``: a flag that differs from the recorded recipe is an error naming the
field, except the few that may change on resume (``max_steps``, ``epochs``, logging/saving steps).
What the file and flags leave out of ``dev_task``, ``eval_tasks``, ``max_seq_length`` and
``output_dir`` is derived from the training data (``train --datasets scifact``: dev and eval on
SciFact, the model's full length, ``output/scifact-mnrl``) and recorded in ``recipe.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import textwrap
import typing
from pathlib import Path
from typing import Any

from contrastive_bert.cli.arguments import (
    add_batch_size_argument,
    add_data_dir_argument,
    add_datasets_argument,
    add_model_argument,
    add_output_dir_argument,
    add_overwrite_argument,
    comma_list,
    parse_json_object,
    show_default,
)
from contrastive_bert.training.data_defaults import RETRIEVAL_LOSS, RETRIEVAL_SCHEDULE
from contrastive_bert.training.recipe import MIXED_PRECISION, RESUME_OVERRIDABLE, TrainingRecipe

_HELP = {
    "loss": "training objective by registry name: mnrl, cached_mnrl, cosent, queue_infonce, acl, cross_layer, ...",
    "loss_options": "JSON object of keyword arguments for the loss, e.g. '{\"scale\": 20}'",
    "epochs": "passes over the training data (used when --max-steps is -1)",
    "max_steps": "optimizer steps to train for; -1 trains for --epochs instead",
    "learning_rate": "peak learning rate of the encoder (AdamW, linear decay after warm-up)",
    "head_learning_rate": "learning rate of the heads on top of the encoder (label and exit heads); none: --learning-rate",
    "warmup_ratio": "fraction of the steps with a linear learning-rate warm-up",
    "weight_decay": "AdamW's decoupled weight decay (not applied to biases and LayerNorm weights)",
    "seed": "random seed of initialisation, shuffling and sampling (same seed, same run)",
    "max_seq_length": "texts are truncated to this many tokens; none keeps the model's limit",
    "max_train_samples": "train on the first N rows of the shuffled training set",
    "max_eval_samples": "cut every evaluation at the start and end of the run (--eval-tasks, and a multi-exit model's "
                        "per-exit accuracy and early-exit sweep) to N shuffled rows per split (a retrieval task: N "
                        "queries, searched over the whole corpus); 0 skips them",
    "min_pair_score": "STS pairs with score >= this (in [0, 1]) are positives",
    "corpus_negatives": "retrieval sets: JSON object; mine hard negatives from the set's own corpus with the model "
                        "about to be trained (never a judged-relevant document), e.g. '{\"num_negatives\": 1}'; with "
                        "'{\"refresh_every_epochs\": 1}' mined again by the model being trained every epoch (ANCE); keys: "
                        "num_negatives, range_max, perc_pos, sampling, refresh_every_epochs, fallback ('pairs': train on the plain "
                        "pairs when too few pairs keep a negative); 'none' trains on the plain pairs",
    "labelled_negatives": "reranking data sets: pair every correct answer with a labelled wrong candidate of its "
                          "question (triplets)",
    "dev_task": "task scored on its validation split every --eval-steps during training ('' for none)",
    "eval_tasks": "comma-separated tasks scored on their test split before and after training ('' for none)",
    "eval_steps": "score --dev-task every N optimizer steps",
    "save_steps": "save a checkpoint (what --resume continues from) every N optimizer steps",
    "save_total_limit": "keep only the N most recent checkpoints",
    "logging_steps": "log the loss and learning rate every N optimizer steps",
    "gradient_accumulation_steps": "sum the gradients of N batches before each optimizer step (a larger effective batch; "
                                   "in-batch negatives still come from one batch)",
    "gradient_checkpointing": "recompute activations in the backward pass: less memory, about a third more time",
    "freeze_layers": "freeze the embeddings and the lowest N encoder layers",
    "freeze_embeddings": "freeze the token, position and type embeddings",
    "max_grad_norm": "clip the gradient norm to this value (0: no clipping)",
    "mixed_precision": "mixed precision: bf16 on CUDA or a CPU (fast on CPUs with AVX512_BF16/AMX, emulated elsewhere), "
                       "fp16 on CUDA only; auto: bf16 or fp16 on CUDA, bf16 on a CPU with bf16 instructions (AVX512_BF16/AMX), else fp32",
    "stages": "JSON list of training stages run in order, each the fields it changes, e.g. '[{\"loss\": \"acl\"}, ...]'",
}
# Fields whose flags come from the shared helpers of cli/arguments.py.
_SHARED = ("model", "datasets", "data_dir", "batch_size", "output_dir", "overwrite", "resume")
_JSON_FIELDS = ("loss_options", "corpus_negatives")
_METAVARS = {"loss": "NAME", "dev_task": "TASK", "eval_tasks": "TASKS"}
# The defaults of the fields derived from the training data (training/data_defaults.py), as --help shows them.
_DERIVED_SHOWN = {
    "dev_task": "the training set itself when it is a retrieval or labelled set, else stsb",
    "eval_tasks": "the training set itself when it is a retrieval or labelled set, else stsb",
    "max_seq_length": "the model's own limit for a retrieval set, else 128",
    "output_dir": "output/<data>-<loss>, e.g. output/scifact-mnrl",
    "corpus_negatives": "'{\"num_negatives\": 1, \"fallback\": \"pairs\"}' for retrieval sets trained by a pair loss, else none",
    "epochs": f"{RETRIEVAL_SCHEDULE['epochs']} for retrieval sets trained by {RETRIEVAL_LOSS} (the benchmark's recipe), "
              f"else {TrainingRecipe.epochs:g}",
    "learning_rate": f"{RETRIEVAL_SCHEDULE['learning_rate']:g} for retrieval sets trained by {RETRIEVAL_LOSS} (chosen on SciFact's "
                     f"dev split), else {TrainingRecipe.learning_rate:g}",
}


def _shown(value: Any) -> str:
    """A default as typed on the command line: on/off for switches, none, lists comma-joined."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value == "" or value == []:
        return "none"
    return show_default(value)


def _flag_type(name: str, hint: Any):
    if name in _JSON_FIELDS or typing.get_origin(hint) is dict:
        return str  # parsed by parse_json_object: a one-line error instead of the usage text
    if typing.get_origin(hint) is list:
        return comma_list if typing.get_args(hint) == (str,) else str
    if name == "dev_task":
        return lambda text: text or None
    for candidate in (bool, int, float):
        if hint is candidate or candidate in typing.get_args(hint):
            return candidate
    return str


def losses_epilog(width: int = 100) -> str:
    """``train --help``'s list of the registered losses, one short line each (the registry's
    description up to its option list: the options are in each class's docstring)."""
    from contrastive_bert.training.losses_registry import LOSSES

    lines = textwrap.wrap("losses (--loss NAME; a wrong option in --loss-options is an error listing the right ones; a name "
                          "from sentence-transformers or a paper, e.g. CoSENTLoss or SupCon, is an error saying what it is "
                          "here):", width=width)
    for name, entry in LOSSES.items():
        about = entry.description.split(" (loss_options")[0]
        lines += textwrap.wrap(f"{name}: {about}", width=width, initial_indent="  ", subsequent_indent="      ")
    return "\n".join(lines)


def add_parser(subparsers) -> argparse.ArgumentParser:
    description = ("Every recipe field is a flag; flags override the file. --resume continues the run recorded in "
                   "<output-dir>/recipe.json from its last checkpoint: a flag that differs from the recorded recipe is an error "
                   "naming the field, except the few that may change on resume (max-steps, epochs, logging and saving steps).")
    parser = subparsers.add_parser(
        "train",
        help="train a model from a recipe file and/or flags",
        description="\n".join(textwrap.wrap(description, width=100)),
        epilog=losses_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    defaults = TrainingRecipe()
    suppress = argparse.SUPPRESS  # a flag not given leaves the file's (or the recorded) value alone
    parser.add_argument("--recipe", metavar="FILE", help="YAML or JSON recipe file (its fields as keys; flags override them)")
    add_model_argument(parser, default=suppress, shown=defaults.model)
    add_datasets_argument(parser, "comma-separated training data sets (registry names or data files)",
                          default=suppress, shown=defaults.datasets)
    add_data_dir_argument(parser, default=suppress)
    add_batch_size_argument(parser, default=suppress, help="training batch size (per device)", shown=defaults.batch_size)
    add_output_dir_argument(parser, "run folder: checkpoints/, final/, recipe.json, results.json",
                            default=suppress, shown=_DERIVED_SHOWN["output_dir"])
    add_overwrite_argument(parser, default=suppress)
    parser.add_argument("--resume", action="store_true", default=suppress,
                        help="continue the run recorded in --output-dir from its last checkpoint "
                        f"(flags may change only {', '.join(f.replace('_', '-') for f in RESUME_OVERRIDABLE)})")
    hints = typing.get_type_hints(TrainingRecipe)
    for field in dataclasses.fields(TrainingRecipe):
        if field.name in _SHARED:
            continue
        flag = "--" + field.name.replace("_", "-")
        kind = _flag_type(field.name, hints[field.name])
        shown = _DERIVED_SHOWN.get(field.name) or _shown(getattr(defaults, field.name))
        help_text = f"{_HELP[field.name]} (default: {shown})"
        if kind is bool:
            parser.add_argument(flag, dest=field.name, action=argparse.BooleanOptionalAction, default=suppress, help=help_text)
        elif field.name == "mixed_precision":
            parser.add_argument(flag, dest=field.name, choices=MIXED_PRECISION, default=suppress, help=help_text)
        else:
            hint = hints[field.name]
            takes_json = field.name in _JSON_FIELDS or (typing.get_origin(hint) in (dict, list) and kind is str)
            metavar = "JSON" if takes_json else _METAVARS.get(field.name) or {int: "N", float: "X"}.get(kind, "VALUE")
            parser.add_argument(flag, dest=field.name, type=kind, default=suppress, metavar=metavar, help=help_text)
    parser.set_defaults(func=run_train)
    return parser


def given_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The recipe fields set on the command line (flags not given are absent); JSON-valued
    flags parsed, a bad one a one-line ``ValueError``."""
    hints = typing.get_type_hints(TrainingRecipe)
    values = {name: getattr(args, name) for name in TrainingRecipe.field_names() if hasattr(args, name)}
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        if name == "corpus_negatives" and isinstance(value, str) and value.strip().lower() in ("none", "null", "off"):
            values[name] = None  # switch off what a retrieval set derives
        elif name in _JSON_FIELDS:
            values[name] = parse_json_object(value, flag)
        elif isinstance(value, str) and typing.get_origin(hints[name]) in (dict, list):
            try:
                values[name] = json.loads(value)
            except json.JSONDecodeError as error:
                raise ValueError(f"{flag}: expected JSON, got {value!r} ({error.msg})") from None
    return values


def recipe_from_args(args: argparse.Namespace) -> TrainingRecipe:
    """The recipe to run: the file (if any) with the flags on top; with ``--resume``, the recorded
    recipe of ``--output-dir`` with the file and flags checked against it."""
    flags = given_fields(args)
    values = {**(TrainingRecipe.read_file(args.recipe) if args.recipe else {}), **flags}
    if values.get("stages"):
        values["stages"] = _flags_into_stages(values["stages"], flags)
    if not values.get("resume"):
        return TrainingRecipe.from_dict(values)
    from contrastive_bert.training.output_dir import prepare_output_dir

    defaults = TrainingRecipe()
    if "output_dir" in values:
        output_dir = values.pop("output_dir")
    else:  # the folder a run of these data and loss was written to by default
        from contrastive_bert.training.data_defaults import default_output_dir

        datasets = values.get("datasets", defaults.datasets)
        names = comma_list(datasets) if isinstance(datasets, str) else list(datasets)
        output_dir = default_output_dir(names, values.get("loss", defaults.loss))
    if values.get("overwrite"):
        raise ValueError("overwrite, resume: choose one: --overwrite starts afresh, --resume continues the last checkpoint")
    if not _recorded_stages(output_dir):  # a staged run keeps its checkpoints under stage-<k>/
        prepare_output_dir(output_dir, resume=True)  # "no run to resume" before "no recipe.json"
    return TrainingRecipe.for_resume(output_dir, values)


# Flags that describe one stage's objective or the whole run: never copied into every stage.
_PER_STAGE_ONLY = ("stages", "output_dir", "overwrite", "resume", "model", "loss", "loss_options")


def _flags_into_stages(stages: list, flags: dict) -> list:
    """A flag typed on the command line wins over the stages' own values (``--max-steps 2`` means
    two steps in every stage), except the fields that define one stage's objective."""
    if not isinstance(stages, list):
        return stages  # the recipe's own check names the field
    shared = {k: v for k, v in flags.items() if k not in _PER_STAGE_ONLY}
    return [{**stage, **shared} if isinstance(stage, dict) else stage for stage in stages]


def _recorded_stages(output_dir: str) -> bool:
    recorded = Path(output_dir) / "recipe.json"
    if not recorded.is_file():
        return False
    try:
        return bool(json.loads(recorded.read_text(encoding="utf-8")).get("stages"))
    except (ValueError, AttributeError):
        return False


class Terminated(BaseException):
    """SIGTERM during training (a scheduler's pre-emption, ``kill``), raised in the main thread."""


# Exit status of a run stopped by a signal, as the shell reports it: 128 + the signal number.
EXIT_INTERRUPTED = 130  # SIGINT (Ctrl-C)
EXIT_TERMINATED = 143  # SIGTERM


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def newest_checkpoint(output_dir: str | Path) -> str | None:
    """The checkpoint a ``--resume`` of ``output_dir`` continues from: the newest ``checkpoint-*``
    under ``checkpoints/`` or, for a staged run, under ``stage-<k>/checkpoints/``."""
    from contrastive_bert.training.output_dir import CHECKPOINTS, last_checkpoint

    output_dir = Path(output_dir)
    roots = [output_dir / CHECKPOINTS, *sorted(output_dir.glob(f"stage-*/{CHECKPOINTS}"))]
    found = [c for c in (last_checkpoint(root) for root in roots) if c is not None]
    return max(found, key=lambda c: Path(c).stat().st_mtime) if found else None


def stopped_message(output_dir: str | Path, how: str) -> str:
    """One line: how training stopped, the checkpoint to continue from and the command that does."""
    from contrastive_bert.training.output_dir import MINED_ROWS, resumable_before_checkpoint

    checkpoint = newest_checkpoint(output_dir)
    resume = f"contrastive-bert train --output-dir {output_dir} --resume"
    if checkpoint is None and resumable_before_checkpoint(output_dir):
        mined = Path(output_dir) / MINED_ROWS
        kept = sum(1 for p in mined.glob("*/report.json")) if mined.is_dir() else 0
        done = (f"the mined rows of {kept} data set{'s' if kept != 1 else ''} are kept in {mined}" if kept
                else "the recipe is recorded (mining starts again)")
        return f"contrastive-bert train: {how} before the first checkpoint was saved; {done}; continue with: {resume}"
    if checkpoint is None:
        return (f"contrastive-bert train: {how} before the first checkpoint was saved; nothing to resume: "
                f"run the same command with --overwrite to start again")
    return f"contrastive-bert train: {how}; last checkpoint {checkpoint}; continue with: {resume}"


def run_train(args: argparse.Namespace) -> int:
    """Handler: train the recipe. A finished run resumed is a message (exit 0, nothing rewritten);
    Ctrl-C and SIGTERM are one line naming the last checkpoint and the resume command (exit 130 / 143)."""
    import signal
    import threading

    from contrastive_bert.training.runner import train

    recipe = recipe_from_args(args)
    _print_accumulation_hint(recipe)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if in_main_thread else None
    try:
        outcome = train(recipe)
    except KeyboardInterrupt:
        print(stopped_message(recipe.output_dir, "interrupted (Ctrl-C)"), file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print(stopped_message(recipe.output_dir, "terminated (SIGTERM)"), file=sys.stderr)
        return EXIT_TERMINATED
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
    if not outcome.main_process:  # launched as several processes: the main one reports the run
        return 0
    if outcome.already_finished:
        print(f"already finished: the run in {outcome.output_dir} trained its {_length(recipe)}; nothing was rewritten "
              f"(final/ and results.json are as they were). Raise --max-steps or --epochs to train further, "
              f"or pass --overwrite to start again.")
        return 0
    if outcome.after:
        print(format_before_after(outcome.before, outcome.after))
    if outcome.multi_exit:
        print(format_exit_accuracy(outcome.multi_exit, f"{outcome.output_dir}/final"))
    if not (outcome.after or outcome.multi_exit):
        print("no before/after scores (no --eval-tasks, or --max-eval-samples 0)")
    print(f"model saved to {outcome.output_dir}/final; scores in {outcome.output_dir}/results.json")
    corpus = _retrieval_dataset(recipe.datasets)
    if corpus is not None:
        print(f"search with it: contrastive-bert search --model {outcome.output_dir}/final --corpus {shlex.quote(corpus)} "
              f"--index {outcome.output_dir}/index --query 'your question'")
    return 0


def format_exit_accuracy(multi_exit: dict, model_dir: str) -> str:
    """A staged multi-exit run's last lines: each exit's test accuracy (``results.json``'s ``multi_exit``),
    then the command that picks an early-exit threshold on dev (the test sweep beside it in results.json
    is for reading, not for choosing)."""
    layers = sorted(multi_exit["exit_accuracy"], key=int)
    cells = ", ".join(f"{layer} {multi_exit['exit_accuracy'][layer]:.2f}" for layer in layers)
    return (f"test accuracy on {multi_exit['dataset']} ({multi_exit['rows']:,} rows) by exit layer: {cells} "
            f"(layer {layers[-1]}: the final classifier)\n"
            f"choose an early-exit threshold on dev: contrastive-bert early-exit --model {shlex.quote(model_dir)} --sweep "
            f"--dataset {shlex.quote(multi_exit['dataset'])}")


def _print_accumulation_hint(recipe) -> None:
    """Once per run: an in-batch loss with gradient accumulation gets no more negatives from it; a
    per-step dual bank without accumulation stays empty."""
    from contrastive_bert.training.losses_registry import accumulation_hint

    stages = [{**vars(recipe), **stage} for stage in recipe.stages] if recipe.stages else [vars(recipe)]
    hints = {accumulation_hint(stage.get("loss", recipe.loss), int(stage.get("gradient_accumulation_steps", 1)),
                               stage.get("loss_options") or {})
             for stage in stages}
    for hint in sorted(h for h in hints if h):
        print(hint, file=sys.stderr)


def _retrieval_dataset(datasets: list[str]) -> str | None:
    """The first retrieval data set trained on (a name or a BEIR folder), for the next command."""
    from contrastive_bert.data import resolve_dataset_argument

    for name in datasets:
        try:
            if resolve_dataset_argument(name).task_type == "retrieval":
                return name
        except ValueError:
            continue
    return None


def _length(recipe) -> str:
    return f"{recipe.max_steps} steps" if recipe.max_steps > 0 else f"{recipe.epochs:g} epochs"


def format_before_after(before: dict, after: dict) -> str:
    lines = [f"{'task':<18}{'before':>10}{'after':>10}{'change':>10}"]
    for task in after:
        b, a = before.get(task, {}).get("main_score"), after[task]["main_score"]
        change = f"{a - b:+10.2f}" if b is not None else f"{'':>10}"
        lines.append(f"{task:<18}{b if b is not None else float('nan'):>10.2f}{a:>10.2f}{change}")
    return "\n".join(lines)
