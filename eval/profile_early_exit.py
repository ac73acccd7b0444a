"""Where the time of one early-exit call goes at batch 1: per-layer time, exit-head time, the exit
decision and the Python around it, against the full model's forward (CPU, one thread).

The measurement is :func:`contrastive_bert.inference.early_exit_profile.profile` (each piece of the
classifier wrapped with a CPU-clock timer, ``predict`` called once per sentence; ``other`` is the
Python around the pieces); this script picks the model and the sentences and prints the result.
``--cprofile`` adds cProfile's top functions by own time.

Model: ``--model`` (a multi-exit folder, e.g. ``<output-dir>/final``), else the bundled
all-MiniLM-L6-v2 with random MHA exits on layers 2-5 (the recipes' layout) and the ``margin``
criterion at threshold 0, so every row leaves at layer 2: the layer-2 path the trained Banking77
model takes for ~95% of rows. Seconds, not minutes:

    OMP_NUM_THREADS=1 .venv/bin/python eval/profile_early_exit.py --sentences 48 --output /tmp/profile.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from contrastive_bert.inference.early_exit_profile import profile


def build_model(path: str | None, device: str = "cpu"):
    """The multi-exit model at ``path``, else the bundled model with random MHA exits on layers 2-5."""
    from contrastive_bert.heads.exits import add_exit_heads, load_multi_exit_model
    from contrastive_bert.models import load_model

    if path:
        return load_multi_exit_model(path, device=device).eval()
    model = load_model("default", device=device)
    model.max_seq_length = 32
    torch.manual_seed(0)
    add_exit_heads(model, [f"class_{k}" for k in range(77)], exit_layers=[2, 3, 4, 5], head_type="mha")
    return model.eval()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="multi-exit model folder (default: bundled model, random exits)")
    parser.add_argument("--dataset", default="banking77", help="texts from this data set's test split")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--sentences", type=int, default=48)
    parser.add_argument("--criterion", default="margin")
    parser.add_argument("--threshold", type=float, default=0.0)
    parser.add_argument("--cprofile", action="store_true", help="add cProfile's top 25 functions by own time")
    parser.add_argument("--output", default=None, help="JSON file (default: print only)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from contrastive_bert.data import load_dataset

    test = load_dataset(args.dataset, split="test", data_dir=args.data_dir).shuffle(seed=0)
    texts = list(test["text"][: args.sentences])
    result = profile(build_model(args.model), texts, args.criterion, args.threshold, args.cprofile)
    text = json.dumps(result, indent=1)
    if args.output:
        Path(args.output).write_text(text + "\n")
    print(text if not args.cprofile else json.dumps({k: v for k, v in result.items() if k != "cprofile_top"}, indent=1))
    if args.cprofile:
        print("\n".join(result["cprofile_top"]))


if __name__ == "__main__":
    main()
