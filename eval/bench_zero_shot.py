"""Zero-shot classification by label names, before and after ACL training, with the bundled model.

- Banking77: 20 intents are held out (chosen with ``--split-seed``); the model is trained (ACL-Embed +
  ACL-Grad, and CE for comparison) on the train rows of the other 57 only, then classifies the test
  rows of the 20 held-out intents zero-shot among those 20 names ("This text is about {}.").
  Also: the untrained model zero-shot on all 77 intents, and the trained head extended with the 20
  embedded names (``add_labels_from_names``) classifying among all 77.
- emotion: zero-shot on its 6 labels, untrained vs the Banking77-57-trained models (cross-domain).

Writes ``eval/results/bench_zero_shot.json``.

    flock /tmp/cbert_bench.lock .venv/bin/python eval/bench_zero_shot.py
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
from pathlib import Path

import numpy as np
import torch

RESULTS = Path(__file__).resolve().parent / "results"
TEMPLATE = "This text is about {}."


def readable(name: str) -> str:
    return name.replace("_", " ")


def zero_shot_accuracy(model, texts: list[str], gold: np.ndarray, names: list[str]) -> float:
    from contrastive_bert.inference import ZeroShotClassifier

    classifier = ZeroShotClassifier(model, [readable(n) for n in names], template=TEMPLATE, batch_size=128)
    return float((classifier.similarities(texts).argmax(axis=1) == gold).mean() * 100)


def main(argv=None) -> int:
    from datasets import ClassLabel

    from contrastive_bert.data import load_dataset
    from contrastive_bert.heads.label_embedding import add_labels_from_names, find_label_head
    from contrastive_bert.models import load_model
    from contrastive_bert.training.acl import train_label_classifier
    from contrastive_bert.training.recipe import TrainingRecipe

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--held-out", type=int, default=20)
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--methods", default="ce,acl_grad")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--head-learning-rate", type=float, default=5e-3, help="learning rate of the freshly initialised label head")
    parser.add_argument("--max-seq-length", type=int, default=32)
    parser.add_argument("--emotion-test-samples", type=int, default=1000)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--output", default=str(RESULTS / "bench_zero_shot.json"))
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    banking = load_dataset("banking77", data_dir=args.data_dir)
    all_names = banking["train"].features["label"].names
    held = sorted(random.Random(args.split_seed).sample(range(len(all_names)), args.held_out))
    seen = [k for k in range(len(all_names)) if k not in held]
    seen_index = {k: i for i, k in enumerate(seen)}
    held_index = {k: i for i, k in enumerate(held)}
    train = banking["train"].filter(lambda row: row["label"] in seen_index)
    train = train.map(lambda row: {"label": seen_index[row["label"]]}).cast_column(
        "label", ClassLabel(names=[all_names[k] for k in seen])
    )
    test_all = banking["test"]
    test_held = test_all.filter(lambda row: row["label"] in held_index)
    held_texts, held_gold = list(test_held["text"]), np.asarray([held_index[y] for y in test_held["label"]])
    held_names = [all_names[k] for k in held]

    emotion = load_dataset("emotion", data_dir=args.data_dir)
    emotion_test = emotion["test"].shuffle(seed=0).select(range(min(args.emotion_test_samples, len(emotion["test"]))))
    emotion_names = emotion["test"].features["label"].names
    emotion_texts, emotion_gold = list(emotion_test["text"]), np.asarray(emotion_test["label"])

    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    results = {
        "config": {**{k: v for k, v in vars(args).items() if k != "output"}, "template": TEMPLATE,
                   "held_out_intents": held_names, "train_rows_57": len(train), "held_out_test_rows": len(test_held),
                   "emotion_test_rows": len(emotion_test)},
        "untrained": {},
        "trained": {},
    }
    model = load_model("default", device="cpu")
    model.max_seq_length = args.max_seq_length
    results["untrained"] = {
        "banking77_all77": zero_shot_accuracy(model, list(test_all["text"]), np.asarray(test_all["label"]), all_names),
        "banking77_heldout20": zero_shot_accuracy(model, held_texts, held_gold, held_names),
        "emotion": zero_shot_accuracy(model, emotion_texts, emotion_gold, emotion_names),
    }
    print("untrained", results["untrained"], flush=True)
    output.write_text(json.dumps(results, indent=1))

    for method in [m.strip() for m in args.methods.split(",") if m.strip()]:
        runs = results["trained"].setdefault(method, {"runs": {}})
        for seed in [int(s) for s in args.seeds.split(",")]:
            torch.manual_seed(seed)
            model = load_model("default", device="cpu")
            recipe = TrainingRecipe(
                datasets=["banking77"], max_steps=args.steps, batch_size=args.batch_size, learning_rate=args.learning_rate,
                head_learning_rate=args.head_learning_rate,
                seed=seed, max_seq_length=args.max_seq_length, logging_steps=max(1, args.steps // 6),
                save_steps=10**6, eval_steps=10**6, dev_task=None, eval_tasks=[],
            )
            with tempfile.TemporaryDirectory() as output_dir:
                train_label_classifier(model, train, [all_names[k] for k in seen], method, recipe, output_dir)
            record = {
                "banking77_heldout20": zero_shot_accuracy(model, held_texts, held_gold, held_names),
                "emotion": zero_shot_accuracy(model, emotion_texts, emotion_gold, emotion_names),
            }
            # extend the trained head with the 20 embedded names and classify among all 77
            head = find_label_head(model)
            add_labels_from_names(model, [readable(n) for n in held_names], template=TEMPLATE)
            order = seen + held  # head row -> original label id
            with torch.no_grad():
                embeddings = model.encode(list(test_all["text"]), batch_size=128, convert_to_tensor=True)
                predicted = np.asarray(order)[head.logits(embeddings).argmax(dim=1).cpu().numpy()]
            gold = np.asarray(test_all["label"])
            is_held = np.isin(gold, held)
            record["head77_on_heldout_rows"] = float((predicted[is_held] == gold[is_held]).mean() * 100)
            record["head77_on_seen_rows"] = float((predicted[~is_held] == gold[~is_held]).mean() * 100)
            runs["runs"][str(seed)] = record
            print(method, seed, record, flush=True)
            runs["summary"] = {
                key: {"mean": statistics.fmean(v), "std": statistics.stdev(v) if len(v) > 1 else 0.0}
                for key in record
                for v in [[r[key] for r in runs["runs"].values()]]
            }
            output.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
