"""Why can a queue of past positives hurt STS? Count how many of the negatives a queue would
hold score like (or above) the anchor's own positive: near-paraphrases that InfoNCE pushes away.

For every training pair (anchor a_i, positive p_i) and every other positive p_j of the same
training set (what the queue holds, here all at once), with the untrained bundled model:

- ``above_positive``: share of anchors with some p_j scoring above cos(a_i, p_i);
- ``within_0.1``: mean number of p_j with cos(a_i, p_j) > cos(a_i, p_i) - 0.1;
- ``kept_by_relative_margin_0.05``: of those, the share the loss's default filter
  (drop p_j scoring above 0.95 * cos(a_i, p_i)) keeps as negatives.

    python eval/diagnose_queue_negatives.py [--data-dir ../shared/data]

Writes eval/results/queue_negatives_diagnosis.json.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from contrastive_bert.benchmarking import add_common_arguments, selected, setup_from_args, write_results
from contrastive_bert.embeddings import encode_normalized
from contrastive_bert.models import load_model
from contrastive_bert.training.train_data import build_train_dataset

SETTINGS = {"sts": ["stsb", "mrpc"], "answer_selection": ["answer_selection"]}


def diagnose(model, names: list[str], data_dir: str | None) -> dict[str, float]:
    pairs = build_train_dataset(names, "pairs", data_dir=data_dir)
    anchors = encode_normalized(model, pairs["anchor"], unique=True).numpy()
    positives = encode_normalized(model, pairs["positive"], unique=True).numpy()
    scores = anchors @ positives.T  # (n, n) cosine; diagonal = own positive
    own = np.diag(scores).copy()
    np.fill_diagonal(scores, -np.inf)
    # the same text as the positive is no negative (the loss drops it by id too)
    texts = np.asarray(pairs["positive"])
    same_text = texts[None, :] == texts[:, None]
    scores[same_text] = -np.inf
    close = scores > (own - 0.1)[:, None]
    kept = close & (scores <= 0.95 * own[:, None])
    return {
        "pairs": len(pairs),
        "mean_positive_score": float(own.mean()),
        "above_positive": float((scores.max(axis=1) > own).mean()),
        "within_0.1": float(close.sum(axis=1).mean()),
        "anchors_with_any_within_0.1": float(close.any(axis=1).mean()),
        "kept_by_relative_margin_0.05": float(kept.sum() / max(close.sum(), 1)),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser, output=Path(__file__).parent / "results" / "queue_negatives_diagnosis.json",
                         methods=list(SETTINGS))
    args = parser.parse_args(argv)
    setup_from_args(args)
    model = load_model("default", device=args.device)
    model.max_seq_length = 64
    results = {setting: diagnose(model, SETTINGS[setting], args.data_dir) for setting in selected(args, list(SETTINGS))}
    for setting, values in results.items():
        print(setting, {k: round(v, 3) for k, v in values.items()})
    write_results(args.output, {"model": "default (all-MiniLM-L6-v2), untrained", "settings": SETTINGS, "results": results}, device=args.device)


if __name__ == "__main__":
    main()
