"""``contrastive-bert classify``: label texts zero-shot by label names, or with a trained label head."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from contrastive_bert.cli.arguments import (
    add_batch_size_argument,
    add_model_argument,
    add_output_argument,
    add_overwrite_argument,
    check_output,
    replace_output,
)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "classify",
        help="classify texts zero-shot by label names (or with the model's trained label head)",
        description="Embed each label through --template and give each text of --input (one per line) "
        "the label with the highest cosine similarity. Without --labels the model's own "
        "LabelEmbeddingClassifier (from ACL training) classifies.",
    )
    add_model_argument(parser)
    parser.add_argument("--labels", default=None, metavar="NAMES", help="comma-separated label names; omit to use the model's trained head")
    parser.add_argument("--input", required=True, metavar="FILE", help="text file, one text per line ('-' for stdin)")
    parser.add_argument("--template", default="This text is about {}.", metavar="TEXT", help="label prompt with '{}' for the name (default: 'This text is about {}.')")
    parser.add_argument("--multi-label", action="store_true", help="every label whose cosine >= --threshold")
    parser.add_argument("--threshold", type=float, default=0.5, metavar="X", help="cosine threshold for --multi-label (default: 0.5)")
    add_batch_size_argument(parser)
    add_output_argument(parser, "also write JSON lines {text, prediction, probabilities} to this file")
    add_overwrite_argument(parser)
    parser.set_defaults(func=run_classify)
    return parser


def read_texts(path: str) -> list[str]:
    """The non-blank lines of ``--input`` (a file, or ``-`` for stdin), stripped."""
    if path == "-":
        lines = sys.stdin.read().splitlines()
    else:
        file = Path(path)
        if not file.is_file():
            raise ValueError(f"--input: file {path} does not exist")
        lines = file.read_text(encoding="utf-8").splitlines()
    texts = [line.strip() for line in lines if line.strip()]
    if not texts:
        raise ValueError(f"--input: {path} contains no texts")
    return texts


def run_classify(args: argparse.Namespace) -> int:
    from contrastive_bert.heads.label_embedding import find_label_head, load_model_with_head, predict_proba
    from contrastive_bert.inference.zero_shot import ZeroShotClassifier
    from contrastive_bert.models import check_model_name

    output = check_output(args.output, args.overwrite)
    check_model_name(args.model)
    labels = None
    if args.labels is not None:
        labels = [name.strip() for name in args.labels.split(",") if name.strip()]
        if len(labels) < 2:
            raise ValueError(f"--labels: need at least 2 comma-separated label names, got {args.labels!r}")
    texts = read_texts(args.input)
    model = load_model_with_head(args.model)
    if labels is None:
        head = find_label_head(model)
        if head is None:
            raise ValueError("--labels: required, the model has no trained label head")
        if args.multi_label:
            raise ValueError("--multi-label: needs --labels (zero-shot); the trained head is single-label")
        names, probabilities = head.label_names, predict_proba(model, texts, batch_size=args.batch_size)
        predictions = [names[i] for i in probabilities.argmax(axis=1)]
    else:
        classifier = ZeroShotClassifier(
            model, labels, template=args.template, multi_label=args.multi_label,
            threshold=args.threshold, batch_size=args.batch_size,
        )
        names, probabilities = classifier.labels, classifier.predict_proba(texts)
        predictions = classifier.predict(texts)
    out = open(replace_output(output), "w", encoding="utf-8") if output is not None else None
    try:
        for text, prediction, row in zip(texts, predictions, probabilities):
            shown = ",".join(prediction) if isinstance(prediction, list) else prediction
            print(f"{shown}\t{text}")
            if out is not None:
                record = {"text": text, "prediction": prediction, "probabilities": dict(zip(names, map(float, row)))}
                out.write(json.dumps(record, allow_nan=False) + "\n")
    finally:
        if out is not None:
            out.close()
    return 0
