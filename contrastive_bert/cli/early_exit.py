"""contrastive-bert early-exit: classify with early exit, or choose the exit setting on dev and report it on test.

Classify (one text per line of --input; one JSON line per text on stdout or --output):

    contrastive-bert early-exit --model output/banking77-multi-exit/final --input texts.txt --criterion margin --threshold 0.3

Sweep on a labelled data set: every setting (criterion and threshold) is measured on the data
set's validation split (the package's dev-split rule carves one from train when the data set has
none); the fastest setting (fewest average layers) whose dev accuracy is within --max-accuracy-loss
points (default 1) of the full model's is chosen, and only that setting is then measured on the
test split (--split) at batch 1 and --batch-size, against the full model, on the wall clock and
the CPU clock. Without --criterion every criterion's default thresholds are swept.

    contrastive-bert early-exit --model output/banking77-multi-exit/final --sweep --dataset banking77
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from contrastive_bert.cli import arguments
from contrastive_bert.inference.exit_criteria import (
    DEFAULT_CRITERION,
    MAX_ACCURACY_LOSS,
    criterion_class,
    criterion_names,
)

logger = logging.getLogger(__name__)


def _thresholds(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one threshold")
    return values


def _criteria_help() -> str:
    parts = []
    for name in criterion_names():
        cls = criterion_class(name)
        shown = "" if cls.default_threshold is None else f" (threshold {cls.default_threshold} unless --threshold)"
        parts.append(f"{name}: {cls.description}{shown}")
    return "; ".join(parts)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``early-exit`` subcommand."""
    parser = subparsers.add_parser(
        "early-exit",
        help="classify with a multi-exit model that stops at a shallow layer when sure; choose the setting on dev",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    arguments.add_model_argument(parser, default=None, help="folder of a multi-exit model (e.g. <output-dir>/final)")
    arguments.add_output_argument(parser, help="classify: JSON-lines file (default stdout); sweep: JSON file of the dev "
                                               "sweep, the dev choice and its test figures")
    arguments.add_overwrite_argument(parser)
    arguments.add_data_dir_argument(parser)
    arguments.add_batch_size_argument(parser, help="texts per batch (sweep: the dev sweep's batch and the larger test batch)")
    arguments.add_dataset_argument(parser, help="sweep: data set name or labelled file (text, label)", required=False)
    parser.add_argument("--criterion", default=None, choices=criterion_names(),
                        help=f"{_criteria_help()}. Classify: default {DEFAULT_CRITERION}; sweep: default every criterion")
    parser.add_argument("--threshold", type=float, default=None, metavar="X",
                        help="classify: exit threshold (patience: the number of agreeing exits) (default: the criterion's)")
    arguments.add_device_argument(parser)
    parser.add_argument("--input", metavar="FILE", help="classify: text file, one text per line")
    parser.add_argument("--sweep", action="store_true",
                        help="choose the criterion and threshold on the validation split, report them on --split")
    arguments.add_split_argument(parser, "test", "sweep: the split the dev-chosen setting is reported on")
    parser.add_argument("--thresholds", type=_thresholds, default=None, metavar="X,Y,...",
                        help="sweep: comma-separated thresholds of --criterion (default: the criterion's sweep)")
    parser.add_argument("--max-accuracy-loss", type=float, default=MAX_ACCURACY_LOSS, metavar="X",
                        help=f"sweep: the most accuracy points below the full model's on dev that a setting may lose "
                             f"(default: {MAX_ACCURACY_LOSS:g})")
    arguments.add_max_samples_argument(parser, "sweep: N rows of the validation and of the test split (a seeded "
                                               "shuffle; default: all)", old_names=("--max-examples",))
    parser.add_argument("--no-regroup", dest="regroup", action="store_false",
                        help="answer each batch on its own (default: rows still running after an exit are "
                             "regrouped across batches into full batches, the same answers faster)")
    parser.set_defaults(func=run)
    return parser


def _sweep_settings(args: argparse.Namespace) -> list[tuple[str, float | int]]:
    """(criterion, threshold) pairs to sweep: --criterion's (--thresholds or its sweep), else every
    criterion that exits with its default sweep."""
    if args.criterion == "none":
        raise ValueError("criterion: --sweep needs a criterion that exits (e.g. margin, confidence, patience)")
    if args.criterion is None and args.thresholds is not None:
        raise ValueError("thresholds: give --criterion too (thresholds mean different things per criterion)")
    if args.criterion is None:
        return [(name, value) for name in criterion_names() if name != "none"
                for value in criterion_class(name).sweep_thresholds]
    cls = criterion_class(args.criterion)
    return [(args.criterion, cls.check_threshold(value)) for value in (args.thresholds or cls.sweep_thresholds)]


def run(args: argparse.Namespace) -> int:
    """Handler: classify ``--input`` or run ``--sweep``; every check before the model loads."""
    from contrastive_bert.heads.exits import check_multi_exit_folder
    from contrastive_bert.models import check_device, check_model_name

    criterion = criterion_class(args.criterion or DEFAULT_CRITERION)
    threshold = None if args.threshold is None else criterion.check_threshold(args.threshold)
    check_model_name(args.model)
    check_device(args.device)
    check_multi_exit_folder(args.model, "model")
    arguments.check_output(args.output, args.overwrite)
    if args.sweep:
        return _run_sweep(args)
    if not args.input:
        raise ValueError("input: give --input FILE (one text per line) or --sweep")
    path = Path(args.input)
    if not path.is_file():
        raise ValueError(f"input: {path} does not exist")
    texts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not texts:
        raise ValueError(f"input: {path} has no non-empty lines")
    from contrastive_bert.inference.early_exit import EarlyExitClassifier

    classifier = EarlyExitClassifier.from_pretrained(
        args.model, criterion.name, threshold, device=args.device, batch_size=args.batch_size, regroup=args.regroup
    )
    result = classifier.predict(texts)
    lines = [
        json.dumps({"text": text, "label": label, "confidence": round(float(probs.max()), 4), "exit_layer": int(layer)}, allow_nan=False)
        for text, label, probs, layer in zip(texts, result.labels, result.probabilities, result.layers_used)
    ]
    if args.output:
        Path(args.output).write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        print("\n".join(lines))
    print(
        f"{len(texts)} texts, average layers {result.avg_layers:.2f} of {classifier.heads.num_layers}, "
        f"criterion {classifier.criterion.name} {classifier.threshold}, {result.throughput:.1f} sentences/s",
        file=sys.stderr,
    )
    return 0


def _rows(split, max_samples: int | None):
    """``split`` cut to ``max_samples`` rows by a seeded shuffle (a test split sorted by label would
    otherwise give a few classes)."""
    if max_samples is None or max_samples >= len(split):
        return split
    return split.shuffle(seed=0).select(range(max_samples))


def _dev_and_test(args: argparse.Namespace):
    """(validation split, --split) of --dataset, each cut to --max-samples rows."""
    from contrastive_bert.data import load_dataset

    data = load_dataset(args.dataset, data_dir=args.data_dir)  # the dev-split rule gives "validation"
    for split in ("validation", args.split):
        if split not in data:
            raise ValueError(f"split: data set {args.dataset!r} has splits {list(data)}, not {split!r}")
        if not {"text", "label"} <= set(data[split].column_names):
            raise ValueError(f"dataset: {args.dataset} needs text and label columns, has {data[split].column_names}")
    if args.split == "validation":
        raise ValueError("split: the setting is chosen on validation; report it on another split (e.g. test)")
    return _rows(data["validation"], args.max_samples), _rows(data[args.split], args.max_samples)


def measure_on_test(model, texts: list[str], labels: list[int], setting: tuple[str, float | int], batch_sizes: list[int],
                 regroup: bool = True) -> dict[str, dict]:
    """The full model and one early-exit ``setting`` measured on (texts, labels) at each batch size:
    {batch: {"full", "early_exit", "speedup" (wall clock), "cpu_speedup" (CPU clock), "accuracy_change"}}."""
    from contrastive_bert.inference.early_exit import sweep_thresholds

    out = {}
    for size in batch_sizes:
        measured = sweep_thresholds(model, texts, labels, [setting], batch_size=size, regroup=regroup)
        full, early = measured["full"], measured["sweep"][0]
        out[str(size)] = {
            "full": full, "early_exit": early,
            "speedup": round(early["throughput"] / full["throughput"], 2),
            "cpu_speedup": round(early["cpu_throughput"] / full["cpu_throughput"], 2),
            "accuracy_change": round(early["accuracy"] - full["accuracy"], 2),
        }
    return out


def format_choice(result: dict) -> str:
    """The dev choice and its test figures as a few lines of text."""
    dev, choice = result["dev"], result["dev_choice"]
    lines = [f"dev ({result['dataset']} validation, {dev['rows']} rows, batch {dev['batch_size']}): "
             f"full model {dev['full']['accuracy']:.2f}%"]
    if choice is None:
        lines.append(f"no setting within {result['max_accuracy_loss']:g} point(s) of the full model on dev: "
                     "use the full model (no early exit)")
        return "\n".join(lines)
    lines.append(f"chosen on dev: {choice['criterion']} {choice['threshold']} ({choice['accuracy']:.2f}%, "
                 f"{choice['avg_layers']:.2f} layers on average: the fewest within {result['max_accuracy_loss']:g} "
                 f"point(s) of the full model)")
    lines.append(f"{result['split']} ({result['test_rows']} rows):")
    lines.append(f"{'batch':>5}  {'full acc':>8}  {'early acc':>9}  {'change':>6}  {'avg layers':>10}  "
                 f"{'speed-up wall':>13}  {'speed-up CPU':>12}")
    for size, part in result["test"].items():
        lines.append(f"{size:>5}  {part['full']['accuracy']:>8.2f}  {part['early_exit']['accuracy']:>9.2f}  "
                     f"{part['accuracy_change']:>+6.2f}  {part['early_exit']['avg_layers']:>10.2f}  "
                     f"{part['speedup']:>12.2f}x  {part['cpu_speedup']:>11.2f}x")
    return "\n".join(lines)


def _run_sweep(args: argparse.Namespace) -> int:
    if not args.dataset:
        raise ValueError("dataset: --sweep needs --dataset")
    settings = _sweep_settings(args)
    if args.max_accuracy_loss < 0:
        raise ValueError(f"max_accuracy_loss: expected a number of points >= 0, got {args.max_accuracy_loss}")
    from contrastive_bert.heads.exits import load_multi_exit_model
    from contrastive_bert.inference.early_exit import choose_exit_setting, sweep_thresholds

    dev, test = _dev_and_test(args)  # before the model loads
    model = load_multi_exit_model(args.model, device=args.device)
    swept = sweep_thresholds(model, dev["text"], dev["label"], settings, args.batch_size, regroup=args.regroup,
                             show_progress_bar=logging.getLogger("contrastive_bert").isEnabledFor(logging.INFO))
    choice = choose_exit_setting(swept, args.max_accuracy_loss)
    result = {"dataset": args.dataset, "split": args.split, "max_accuracy_loss": args.max_accuracy_loss,
              "dev": {"split": "validation", "rows": len(dev), "batch_size": args.batch_size, **swept},
              "dev_choice": choice, "test_rows": len(test), "test": {}}
    if choice is not None:
        sizes = sorted({1, args.batch_size})
        result["test"] = measure_on_test(model, list(test["text"]), list(test["label"]),
                                      (choice["criterion"], choice["threshold"]), sizes, regroup=args.regroup)
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    print(format_choice(result))
    return 0
