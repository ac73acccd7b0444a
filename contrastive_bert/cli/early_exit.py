"""``contrastive-bert early-exit``: classify with early exit, or sweep exit thresholds.

Classify (one text per line of ``--input``; one JSON line per text on stdout or ``--output``)::

    contrastive-bert early-exit --model output/multi_exit/banking77 --input texts.txt \
        --criterion confidence --threshold 0.9

Sweep on a labelled data set (accuracy, throughput and average layers per threshold)::

    contrastive-bert early-exit --model M --sweep --dataset banking77 --criterion margin \
        --thresholds 0.1,0.3,0.5 --max-examples 500
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from contrastive_bert.inference.exit_criteria import DEFAULT_THRESHOLDS, EXIT_CRITERIA


def _thresholds(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one threshold")
    return values


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``early-exit`` subcommand."""
    parser = subparsers.add_parser(
        "early-exit",
        help="classify with a multi-exit model that stops at a shallow layer when sure; sweep thresholds",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", required=True, help="folder of a multi-exit model (save_multi_exit_model)")
    parser.add_argument("--criterion", default="confidence", choices=EXIT_CRITERIA)
    parser.add_argument("--threshold", type=float, default=None,
                        help=f"exit threshold in [0, 1] (defaults: {DEFAULT_THRESHOLDS})")
    parser.add_argument("--patience", type=int, default=2, help="consecutive agreeing exits (criterion patience)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--device", default=None)
    parser.add_argument("--input", help="classify: text file, one text per line")
    parser.add_argument("--output", help="classify: JSON-lines output file (default stdout); sweep: JSON file")
    parser.add_argument("--sweep", action="store_true", help="sweep thresholds on a labelled data set")
    parser.add_argument("--dataset", help="sweep: data set name (contrastive_bert.data)")
    parser.add_argument("--data-dir", default=None, help="sweep: local data root")
    parser.add_argument("--split", default="test")
    parser.add_argument("--thresholds", type=_thresholds, default=None,
                        help="sweep: comma-separated thresholds (patience: patience values)")
    parser.add_argument("--max-examples", type=int, default=None, help="sweep: first N examples only")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Handler: classify ``--input`` or run ``--sweep``."""
    from contrastive_bert.heads.exits import load_multi_exit_model
    from contrastive_bert.inference.early_exit import EarlyExitClassifier, check_threshold, sweep_thresholds

    check_threshold(args.criterion, args.threshold)
    if args.batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {args.batch_size}")
    if not Path(args.model).is_dir():
        raise ValueError(f"model: {args.model} is not a folder")
    if args.sweep:
        if not args.dataset:
            raise ValueError("dataset: --sweep needs --dataset")
        from contrastive_bert.data import load_dataset

        split = load_dataset(args.dataset, data_dir=args.data_dir)[args.split]
        if args.max_examples is not None:
            split = split.select(range(min(args.max_examples, len(split))))
        if args.criterion == "none":
            raise ValueError("criterion: --sweep needs confidence, margin or patience")
        values = args.thresholds or ([2, 3] if args.criterion == "patience" else [0.5, 0.7, 0.9, 0.95])
        for value in values:
            if args.criterion == "patience":
                if value < 1 or value != int(value):
                    raise ValueError(f"thresholds: patience values must be integers >= 1, got {value}")
            else:
                check_threshold(args.criterion, value)
        model = load_multi_exit_model(args.model, device=args.device)
        settings = [(args.criterion, int(v) if args.criterion == "patience" else v) for v in values]
        result = {"dataset": args.dataset, **sweep_thresholds(model, split["text"], split["label"], settings, args.batch_size)}
        text = json.dumps(result, indent=2)
        if args.output:
            Path(args.output).write_text(text + "\n", encoding="utf-8")
        print(text)
        return 0
    if not args.input:
        raise ValueError("input: give --input FILE (one text per line) or --sweep")
    path = Path(args.input)
    if not path.is_file():
        raise ValueError(f"input: {path} does not exist")
    texts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not texts:
        raise ValueError(f"input: {path} has no non-empty lines")
    model = load_multi_exit_model(args.model, device=args.device)
    classifier = EarlyExitClassifier(model, args.criterion, args.threshold, args.patience, args.batch_size)
    result = classifier.predict(texts)
    lines = [
        json.dumps({"text": text, "label": label, "confidence": round(float(probs.max()), 4), "exit_layer": int(layer)})
        for text, label, probs, layer in zip(texts, result.labels, result.probabilities, result.exit_layers)
    ]
    if args.output:
        Path(args.output).write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        print("\n".join(lines))
    print(
        f"{len(texts)} texts, average layers {result.avg_layers:.2f} of {classifier.heads.num_layers}, "
        f"per batch {[round(x, 2) for x in result.batch_avg_layers]}, {result.throughput:.1f} sentences/s",
        file=sys.stderr,
    )
    return 0
