"""contrastive-bert early-exit: classify with early exit, or sweep exit thresholds.

Classify (one text per line of --input; one JSON line per text on stdout or --output):

    contrastive-bert early-exit --model output/banking77-multi-exit/final --input texts.txt --criterion confidence --threshold 0.9

Sweep on a labelled data set (accuracy, throughput and average layers of the full model and
of each threshold; defaults: the margin criterion and its default thresholds):

    contrastive-bert early-exit --model output/banking77-multi-exit/final --sweep --dataset banking77
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from contrastive_bert.cli import arguments
from contrastive_bert.inference.exit_criteria import DEFAULT_CRITERION, criterion_class, criterion_names

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
    return "; ".join(
        f"{name}: {criterion_class(name).description} (default {criterion_class(name).default_threshold})"
        for name in criterion_names()
    )


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``early-exit`` subcommand."""
    parser = subparsers.add_parser(
        "early-exit",
        help="classify with a multi-exit model that stops at a shallow layer when sure; sweep thresholds",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    arguments.add_model_argument(parser, default=None, help="folder of a multi-exit model (e.g. <output-dir>/final)")
    arguments.add_output_argument(parser, help="classify: JSON-lines file (default stdout); sweep: JSON file")
    arguments.add_overwrite_argument(parser)
    arguments.add_data_dir_argument(parser)
    arguments.add_batch_size_argument(parser)
    arguments.add_dataset_argument(parser, help="sweep: data set name (contrastive_bert.data)", required=False)
    parser.add_argument("--criterion", default=DEFAULT_CRITERION, choices=criterion_names(), help=_criteria_help())
    parser.add_argument("--threshold", type=float, default=None,
                        help="exit threshold (patience: the number of agreeing exits); default: the criterion's")
    parser.add_argument("--device", default=None)
    parser.add_argument("--input", help="classify: text file, one text per line")
    parser.add_argument("--sweep", action="store_true", help="sweep thresholds on a labelled data set")
    parser.add_argument("--split", default="test")
    parser.add_argument("--thresholds", type=_thresholds, default=None,
                        help="sweep: comma-separated thresholds (default: the criterion's sweep)")
    parser.add_argument("--max-examples", type=int, default=None, help="sweep: first N examples only")
    parser.add_argument("--no-regroup", dest="regroup", action="store_false",
                        help="answer each batch on its own (default: rows still running after an exit are "
                             "regrouped across batches into full batches, the same answers faster)")
    parser.set_defaults(func=run)
    return parser


def _sweep_values(args: argparse.Namespace) -> list[float | int]:
    cls = criterion_class(args.criterion)
    if args.criterion == "none":
        raise ValueError("criterion: --sweep needs a criterion that exits (e.g. margin, confidence, patience)")
    values = args.thresholds or list(cls.sweep_thresholds)
    return [cls.check_threshold(value) for value in values]


def run(args: argparse.Namespace) -> int:
    """Handler: classify ``--input`` or run ``--sweep``; every check before the model loads."""
    criterion = criterion_class(args.criterion)
    threshold = None if args.threshold is None else criterion.check_threshold(args.threshold)
    if not Path(args.model).is_dir():
        raise ValueError(f"model: {args.model} is not a folder")
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
        args.model, args.criterion, threshold, device=args.device, batch_size=args.batch_size, regroup=args.regroup
    )
    result = classifier.predict(texts)
    lines = [
        json.dumps({"text": text, "label": label, "confidence": round(float(probs.max()), 4), "exit_layer": int(layer)}, allow_nan=False)
        for text, label, probs, layer in zip(texts, result.labels, result.probabilities, result.exit_layers)
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


def _run_sweep(args: argparse.Namespace) -> int:
    if not args.dataset:
        raise ValueError("dataset: --sweep needs --dataset")
    values = _sweep_values(args)
    if args.max_examples is not None and args.max_examples < 1:
        raise ValueError(f"max_examples: expected a positive integer, got {args.max_examples}")
    from contrastive_bert.data import load_dataset
    from contrastive_bert.heads.exits import load_multi_exit_model
    from contrastive_bert.inference.early_exit import sweep_thresholds

    split = load_dataset(args.dataset, split=args.split, data_dir=args.data_dir)
    if args.max_examples is not None:
        split = split.select(range(min(args.max_examples, len(split))))
    model = load_multi_exit_model(args.model, device=args.device)
    settings = [(args.criterion, value) for value in values]
    result = {"dataset": args.dataset, "split": args.split, "rows": len(split),
              **sweep_thresholds(model, split["text"], split["label"], settings, args.batch_size, regroup=args.regroup)}
    text = json.dumps(result, indent=2, allow_nan=False)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0
