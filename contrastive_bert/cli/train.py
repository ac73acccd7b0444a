"""``contrastive-bert train``: run a training recipe (file and/or flags) in SentenceTransformerTrainer."""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing

from contrastive_bert.training.recipe import TrainingRecipe

_HELP = {
    "model": "'default' (bundled all-MiniLM-L6-v2), a local folder or a hub id",
    "datasets": "comma-separated training data sets (registry names)",
    "loss": "loss name: mnrl, cached_mnrl, cosent, queue_infonce, acl, ...",
    "loss_options": "JSON object of keyword arguments for the loss, e.g. '{\"scale\": 20}'",
    "data_dir": "local data root (default: $CONTRASTIVE_BERT_DATA, else the hub)",
    "max_steps": "number of optimizer steps (-1: use --epochs)",
    "max_train_samples": "cut the shuffled training set to this many rows",
    "min_pair_score": "STS pairs with score >= this (in [0, 1]) are positives",
    "dev_task": "task evaluated on its validation split during training ('' for none)",
    "eval_tasks": "comma-separated tasks evaluated on test before and after training",
    "freeze_layers": "freeze the embeddings and the lowest N encoder layers",
    "mixed_precision": "no, fp16, bf16 or auto (CUDA only)",
    "overwrite": "replace the run in an existing output directory",
    "resume": "continue from the last checkpoint in the output directory",
}


def _flag_type(field: dataclasses.Field):
    hint = typing.get_type_hints(TrainingRecipe)[field.name]
    if field.name in ("loss_options",):
        return json.loads
    if field.name in ("datasets", "eval_tasks"):
        return lambda text: [name.strip() for name in text.split(",") if name.strip()]
    if field.name == "dev_task":
        return lambda text: text or None
    for candidate in (bool, int, float):
        if hint is candidate or candidate in typing.get_args(hint):
            return candidate
    return str


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a model from a recipe file and/or flags",
        description="Train inside SentenceTransformerTrainer. Every recipe field is also a flag; flags override the file.",
    )
    parser.add_argument("--recipe", help="YAML or JSON recipe file")
    for field in dataclasses.fields(TrainingRecipe):
        flag = "--" + field.name.replace("_", "-")
        kind = _flag_type(field)
        default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        help_text = f"{_HELP.get(field.name, field.name.replace('_', ' '))} (default: {default})"
        if kind is bool:
            parser.add_argument(flag, dest=field.name, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=help_text)
        else:
            parser.add_argument(flag, dest=field.name, type=kind, default=argparse.SUPPRESS, help=help_text)
    parser.set_defaults(func=run_train)


def recipe_from_args(args: argparse.Namespace) -> TrainingRecipe:
    overrides = {name: getattr(args, name) for name in TrainingRecipe.field_names() if hasattr(args, name)}
    if args.recipe:
        return TrainingRecipe.from_file(args.recipe, overrides)
    return TrainingRecipe.from_dict(overrides)


def run_train(args: argparse.Namespace) -> int:
    from contrastive_bert.training.runner import train

    recipe = recipe_from_args(args)
    outcome = train(recipe)
    print(format_before_after(outcome.before, outcome.after))
    print(f"model saved to {outcome.output_dir}/final; scores in {outcome.output_dir}/results.json")
    return 0


def format_before_after(before: dict, after: dict) -> str:
    lines = [f"{'task':<18}{'before':>10}{'after':>10}{'change':>10}"]
    for task in after:
        b, a = before.get(task, {}).get("main_score"), after[task]["main_score"]
        change = f"{a - b:+10.2f}" if b is not None else f"{'':>10}"
        lines.append(f"{task:<18}{b if b is not None else float('nan'):>10.2f}{a:>10.2f}{change}")
    return "\n".join(lines)
