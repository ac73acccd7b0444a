"""Does fine-tuning for one task cost the model what it could do before? One block of checks
reported for every trained model in the quality benchmarks.

The block: STS-B test Spearman (graded similarity) and zero-shot classification by label names
(cosine to ``"This text is about {name}."``) on Banking77 (77 intents), emotion (6 emotions) and
SST-2 (positive / negative), each on its test split. Compare with the untrained model's block:
these are *these* sets, not "general ability" in full (a model can keep all four and still lose
on a topic set none of them covers).
"""

from __future__ import annotations

import numpy as np

from contrastive_bert.data import load_dataset
from contrastive_bert.evaluation.tasks import evaluate_split
from contrastive_bert.inference.zero_shot import ZeroShotClassifier

ZERO_SHOT_SETS = ("banking77", "emotion", "sst2")
ZERO_SHOT_TEMPLATE = "This text is about {}."


def zero_shot_accuracy(
    model, dataset: str, data_dir: str | None = None, split: str = "test", template: str = ZERO_SHOT_TEMPLATE,
    max_rows: int | None = None, batch_size: int = 128,
) -> float:
    """Accuracy x100 of classifying ``split`` of a classification data set by its label names
    (underscores read as spaces), with no training."""
    rows = load_dataset(dataset, split=split, data_dir=data_dir)
    if max_rows is not None and len(rows) > max_rows:
        rows = rows.shuffle(seed=0).select(range(max_rows))
    names = [name.replace("_", " ") for name in rows.features["label"].names]
    classifier = ZeroShotClassifier(model, names, template=template, batch_size=batch_size)
    predicted = classifier.similarities(list(rows["text"])).argmax(axis=1)
    return float((predicted == np.asarray(rows["label"])).mean() * 100)


def general_ability(model, data_dir: str | None = None, max_rows: int | None = None) -> dict:
    """``{"stsb": Spearman x100, "zero_shot": {set: accuracy x100}, "zero_shot_mean": ...}`` on the
    test splits (``max_rows``: a random subset of each, for smoke runs)."""
    stsb = load_dataset("stsb", data_dir=data_dir)
    if max_rows is not None:
        stsb = {**stsb, "test": stsb["test"].select(range(min(max_rows, len(stsb["test"]))))}
    zero_shot = {name: zero_shot_accuracy(model, name, data_dir, max_rows=max_rows) for name in ZERO_SHOT_SETS}
    return {
        "stsb": evaluate_split(model, "stsb", stsb, split="test")["main_score"],
        "zero_shot": zero_shot,
        "zero_shot_mean": float(np.mean(list(zero_shot.values()))),
    }


def summarize_general(blocks: list[dict | None]) -> dict | None:
    """Mean ± std over runs of their :func:`general_ability` blocks, flat: ``stsb``,
    ``zero_shot_<set>``, ``zero_shot_mean``; None if any run lacks the block (runs logged before
    it existed), so a partial mean is never reported."""
    from contrastive_bert.benchmarking import mean_std

    if not blocks or any(block is None for block in blocks):
        return None
    summary = {"stsb": mean_std([b["stsb"] for b in blocks])}
    for name in ZERO_SHOT_SETS:
        summary[f"zero_shot_{name}"] = mean_std([b["zero_shot"][name] for b in blocks])
    summary["zero_shot_mean"] = mean_std([b["zero_shot_mean"] for b in blocks])
    return summary
