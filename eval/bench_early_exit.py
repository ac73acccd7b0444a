"""Speed/accuracy of real early exit vs the full model vs fixed-depth truncated models (CPU), at
batch 1 and batch 32, on the full Banking77 test set, all in one run.

Model: ``<output-dir>/final`` of the bundled two-stage recipe
(``scripts/recipes/banking77_multi_exit.yaml``: ACL stage 1, ACL-CL MHA exits on layers 2-5);
trained here through ``contrastive-bert train`` when it is missing. Truncated = the first d layers
answered by the exit on layer d (the AdaptiveLayer way of buying speed); early exit drops the rows
that exit from the remaining layers and regroups the rows still running across batches into full
batches (``sweep``); ``sweep_per_batch`` (batch > 1) is the ablation that answers each batch on its
own. Throughput (sentences/s) includes tokenisation; texts are sorted by length as ``encode`` does.
Accuracy in percent.

The setting to use is chosen on dev, not on test: every setting is swept on Banking77's
validation split (the package's dev-split rule: a stratified 10% of train held out) at batch 32,
and the fastest (fewest average layers) within 1 point of the full model's dev accuracy is the
``dev_choice`` (:func:`contrastive_bert.inference.early_exit.choose_on_dev`, the rule of
``contrastive-bert early-exit --sweep``); its test figures are read off the test sweep at every
batch size (``summary.chosen_on_dev``). The ``best_within_1_point*`` entries pick on test: an
optimistic upper bound, kept for comparison only.

Writes ``eval/results/early_exit.json``::

    {"dataset", "model", "dev_choice": {"split", "rows", "batch_size", "full_accuracy", "criterion",
      "threshold", "accuracy", "avg_layers", "accuracy_loss", "test": {"32": {...}, "1": {...}}},
      "batch_sizes": {"1": {"full": {"accuracy", "throughput", "avg_layers"},
      "truncated": [{"depth", ...}], "sweep": [{"criterion", "threshold", "accuracy", "throughput",
      "avg_layers"}], "sweep_per_batch": [...], "cost_ms_per_batch": {...}}, "32": {...}},
      "summary": {...}, "setup": {...}, "environment": {...}}

Each measured part (the dev sweep, each batch size) is a record of the run log
(``eval/results/early_exit.runs.jsonl``): a rerun skips the parts already measured
(``--summary-only`` rebuilds the JSON from the log).

``cost_ms_per_batch``: CPU milliseconds per batch of tokenisation, embeddings, layer mask, one
layer, one exit head, the final classifier and the exit decision (where the time goes).

(for ``patience`` the threshold is the number of agreeing exits) and ``early_exit_banking77.png``.
Run: ``OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false .venv/bin/python eval/bench_early_exit.py --repeats 2``
(smoke run: ``--dry-run``, at most 32 rows per split, to another ``--output`` and ``--run-log``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

import torch

from contrastive_bert.benchmarking import RunLog, add_common_arguments, setup_from_args, write_results

logger = logging.getLogger("bench_early_exit")

RESULTS = Path(__file__).resolve().parent / "results"
DEV_BATCH_SIZE = 32
RECIPE = Path(__file__).resolve().parents[1] / "scripts" / "recipes" / "banking77_multi_exit.yaml"

SETTINGS = (
    [("confidence", t) for t in (0.5, 0.7, 0.8, 0.9, 0.95)]
    + [("margin", t) for t in (0.1, 0.2, 0.3, 0.5, 0.7)]
    + [("patience", t) for t in (2, 3)]
)
# Ablation at batch > 1: the same early exit answering each batch on its own (no regrouping of the
# rows still running across batches), at the settings near the 1-point budget.
PER_BATCH_SETTINGS = [("margin", t) for t in (0.2, 0.3, 0.5)] + [("confidence", t) for t in (0.8, 0.9)]


def trained_model(output_dir: Path) -> Path:
    """``<output_dir>/final``, trained by the bundled recipe through the CLI when missing."""
    final = output_dir / "final"
    if not (final / "modules.json").is_file():
        from contrastive_bert.cli import main

        code = main(["train", "--recipe", str(RECIPE), "--output-dir", str(output_dir)])
        if code != 0:
            raise SystemExit(f"training the multi-exit model failed (exit code {code})")
    return final


def profile_costs(model, texts: list[str], batch_size: int, max_batches: int = 40) -> dict[str, float]:
    """CPU milliseconds per batch of ``batch_size`` (texts in length order, as the classifier
    runs them) of each piece of an early-exit pass: tokenisation, embeddings, the layer mask, one
    encoder layer (mean of all), an intermediate exit head, the final classifier, and the exit
    decision. Shows what the layer count alone cannot: the fixed cost every row pays."""
    from contrastive_bert.inference.early_exit import EarlyExitClassifier

    classifier = EarlyExitClassifier(model, "margin", 0.2, batch_size=batch_size)
    encoder, heads = classifier.encoder, classifier.heads
    ordered = sorted(texts, key=len, reverse=True)
    batches = [ordered[b : b + batch_size] for b in range(0, len(ordered), batch_size)][:max_batches]
    totals = {k: 0.0 for k in ("tokenise", "embed", "mask", "layer", "exit_head", "final_head", "decision")}
    first_exit = heads.exit_layers[0] if heads.exit_layers else heads.num_layers

    def timed(key: str, fn):
        start = time.process_time()
        out = fn()
        totals[key] += (time.process_time() - start) * 1000.0
        return out

    with torch.inference_mode():
        for batch in batches:
            features = timed("tokenise", lambda: classifier.tokenize(batch))
            hidden = timed("embed", lambda: encoder.embed(features["input_ids"], features.get("token_type_ids")))
            mask = timed("mask", lambda: encoder.prepare_mask(hidden, features["attention_mask"]))
            states = {}
            for layer in range(1, encoder.num_layers + 1):
                hidden = timed("layer", lambda: encoder.layer(layer, hidden, mask))
                states[layer] = hidden
            _, logits = timed("exit_head", lambda: heads.forward_layer(first_exit, states[first_exit], mask.padding))
            timed("final_head", lambda: heads.forward_layer(heads.num_layers, states[heads.num_layers], mask.padding))
            probs = logits.softmax(-1)
            timed("decision", lambda: classifier.criterion.should_exit(probs, probs.argmax(-1, keepdim=True)))
    out = {k: round(v / len(batches), 3) for k, v in totals.items()}
    out["layer"] = round(out["layer"] / encoder.num_layers, 3)
    out["batches"] = len(batches)
    return out


def best_within(result: dict, max_loss: float = 1.0, clock: str = "throughput") -> dict | None:
    """The fastest sweep setting (by ``clock``: wall ``throughput`` or ``cpu_throughput``) within
    ``max_loss`` points of the full model, with its speed-ups on both clocks."""
    ok = [s for s in result["sweep"] if s["accuracy"] >= result["full"]["accuracy"] - max_loss]
    if not ok:
        return None
    best = max(ok, key=lambda s: s[clock])
    full = result["full"]
    return {**best, "speedup": round(best["throughput"] / full["throughput"], 2),
            "cpu_speedup": round(best["cpu_throughput"] / full["cpu_throughput"], 2) if "cpu_throughput" in full else None,
            "accuracy_loss": round(full["accuracy"] - best["accuracy"], 2)}


def plot(result: dict, path: Path) -> None:
    """Accuracy against throughput per batch size: CPU-clock throughput where measured (robust
    to a loaded machine), else wall-clock."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(result["batch_sizes"])
    fig, axes = plt.subplots(1, len(sizes), figsize=(5.5 * len(sizes), 4.2), squeeze=False)
    markers = {"confidence": "o", "margin": "s", "patience": "^"}
    for ax, size in zip(axes[0], sizes):
        part = result["batch_sizes"][size]
        clock = "cpu_throughput" if "cpu_throughput" in part["full"] else "throughput"
        for criterion, marker in markers.items():
            points = [s for s in part["sweep"] if s["criterion"] == criterion]
            if points:
                ax.plot([p[clock] for p in points], [p["accuracy"] for p in points], marker=marker,
                        label=f"early exit: {criterion}")
                for p in points:
                    ax.annotate(str(p["threshold"]), (p[clock], p["accuracy"]), fontsize=6, xytext=(2, 2),
                                textcoords="offset points")
        apart = part.get("sweep_per_batch", [])
        if apart:
            ax.plot([p[clock] for p in apart], [p["accuracy"] for p in apart], "+:", color="purple",
                    label="early exit, each batch on its own (no regrouping)")
        truncated = part["truncated"]
        ax.plot([t[clock] for t in truncated], [t["accuracy"] for t in truncated], "x--", color="gray",
                label="truncated to depth d")
        ax.plot([part["full"][clock]], [part["full"]["accuracy"]], "*", markersize=14, color="black", label="full model")
        ax.axhline(part["full"]["accuracy"] - 1.0, color="red", linewidth=0.8, linestyle=":", label="full - 1 point")
        ax.set_title(f"batch {size}")
        unit = "sentences per CPU-second, 1 thread" if clock == "cpu_throughput" else "sentences/s"
        ax.set_xlabel(f"throughput ({unit}, tokenisation included)")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{result['dataset']}: early exit vs truncation, {result['setup']['test_size']} test sentences")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def chosen_on_dev(dev: dict, batch_sizes: dict) -> dict | None:
    """The dev choice (see the module doc) with its test figures at every batch size measured."""
    from contrastive_bert.inference.early_exit import choose_on_dev

    choice = choose_on_dev(dev)
    if choice is None:
        return None
    test = {}
    for size, part in batch_sizes.items():
        row = next((s for s in part["sweep"] if (s["criterion"], s["threshold"]) == (choice["criterion"], choice["threshold"])), None)
        if row is None:
            continue
        full = part["full"]
        test[size] = {**row, "speedup": round(row["throughput"] / full["throughput"], 2),
                      "cpu_speedup": round(row["cpu_throughput"] / full["cpu_throughput"], 2),
                      "accuracy_loss": round(full["accuracy"] - row["accuracy"], 2), "full_accuracy": full["accuracy"]}
    return {"split": "validation", "rows": dev["rows"], "batch_size": dev["batch_size"],
            "rule": "fewest average layers with dev accuracy within 1 point of the full model's", **choice, "test": test}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", default="output/banking77-multi-exit", help="run folder of the two-stage recipe")
    parser.add_argument("--batch-sizes", default="32,1", help="in this order; the JSON is written after each")
    parser.add_argument("--repeats", type=int, default=1, help="timed passes per setting (the fastest is kept)")
    add_common_arguments(parser, output=RESULTS / "early_exit.json", run_log=RESULTS / "early_exit.runs.jsonl")
    args = parser.parse_args(argv)
    setup_from_args(args)
    committed = {Path(RESULTS / "early_exit.json").resolve(), Path(RESULTS / "early_exit.runs.jsonl").resolve()}
    if args.dry_run and {Path(args.output).resolve(), Path(args.run_log).resolve()} & committed:
        raise SystemExit("--dry-run: give --output and --run-log outside the committed results (its numbers are meaningless)")
    log = RunLog(args.run_log)
    if args.summary_only:
        write(assemble(log, args), args)
        return

    from contrastive_bert.data import load_dataset
    from contrastive_bert.heads.exits import get_exit_heads, load_multi_exit_model
    from contrastive_bert.inference.early_exit import sweep_thresholds

    started = time.time()
    final = trained_model(Path(args.output_dir))
    model = load_multi_exit_model(str(final), device=args.device).eval()
    heads = get_exit_heads(model)
    data = load_dataset("banking77", data_dir=args.data_dir)  # "validation": the package's dev-split rule
    rows = args.eval_rows
    dev, test = data["validation"], data["test"]
    dev_texts, dev_labels = list(dev["text"])[:rows], list(dev["label"])[:rows]
    texts, labels = list(test["text"])[:rows], list(test["label"])[:rows]
    depths = heads.exit_layers
    setup = {
        "model": str(final), "test_size": len(texts), "dev_size": len(dev_texts),
        "exit_heads": f"{heads.head_type} on layers {heads.exit_layers} + final linear",
        "max_seq_length": model.max_seq_length, "threads": torch.get_num_threads(),
        "tokenizers_parallelism": os.environ.get("TOKENIZERS_PARALLELISM", "unset"), "repeats": args.repeats,
        "dry_run": args.dry_run,
    }
    sweep_thresholds(model, texts[:64], labels[:64], SETTINGS[:1], batch_size=32, truncated_depths=depths[:1])  # warm-up
    if not log.done("dev"):
        measured = sweep_thresholds(model, dev_texts, dev_labels, SETTINGS, batch_size=DEV_BATCH_SIZE, repeats=args.repeats)
        log.append("dev", {"dev": {"split": "validation", "rows": len(dev_texts), "batch_size": DEV_BATCH_SIZE,
                                   **{k: measured[k] for k in ("full", "sweep")}}, "setup": setup})
    for size in (int(s) for s in args.batch_sizes.split(",")):
        key = f"batch-{size}"
        if log.done(key):
            logger.info("batch %d: in the run log already, skipped", size)
            continue
        if not args.budget.allows(f"batch-{size}"):
            logger.info("batch %d: not started, --max-minutes would be exceeded; rerun to continue", size)
            break
        start = time.time()
        measured = sweep_thresholds(model, texts, labels, SETTINGS, batch_size=size, truncated_depths=depths,
                                    repeats=args.repeats)
        part = {k: measured[k] for k in ("full", "truncated", "sweep")}
        part["cost_ms_per_batch"] = profile_costs(model, texts, size)
        if size > 1:
            apart = sweep_thresholds(model, texts, labels, PER_BATCH_SETTINGS, batch_size=size, repeats=args.repeats,
                                     regroup=False)
            part["sweep_per_batch"] = apart["sweep"]
        args.budget.record(f"batch-{size}", time.time() - start)
        log.append(key, {"batch_size": size, "part": part, "setup": setup, "seconds": round(time.time() - start, 1)})
        logger.info("batch %d: full %s, best within 1 point on test %s", size, measured["full"], best_within(measured))
        write(assemble(log, args), args)
    result = assemble(log, args)
    result["setup"]["seconds_this_run"] = round(time.time() - started, 1)
    write(result, args)
    print(json.dumps({"dev_choice": result["dev_choice"], "summary": result["summary"]}, indent=1))


def assemble(log: RunLog, args: argparse.Namespace) -> dict:
    """The results JSON from the run log's records: the dev sweep and choice, each batch size, the summary."""
    dev_record = log.get("dev")
    parts = {str(r["batch_size"]): r["part"] for r in log.records() if r["key"].startswith("batch-")}
    setup = dict((dev_record or {}).get("setup") or next((r["setup"] for r in log.records() if "setup" in r), {}))
    setup["seconds"] = round(sum(r.get("seconds", 0.0) for r in log.records()), 1)
    setup["notes"] = (
        "throughput includes tokenisation; cpu_throughput = sentences per CPU-second of this process "
        "(one torch thread: robust to other processes loading the machine, which wall-clock throughput is not); "
        "'threshold' holds the patience t for criterion 'patience'; truncated = first d layers answered by the exit on layer d; "
        "dev_choice is chosen on the validation split, best_within_1_point* on test (optimistic, for comparison)"
    )
    choice = chosen_on_dev(dev_record["dev"], parts) if dev_record else None
    summary = {
        "chosen_on_dev": (choice or {}).get("test", {}),
        "best_within_1_point": {size: best_within(part) for size, part in parts.items()},
        "best_within_1_point_cpu_clock": {size: best_within(part, clock="cpu_throughput") for size, part in parts.items()},
        "best_within_1_point_per_batch": {
            size: best_within({"full": part["full"], "sweep": part["sweep_per_batch"]})
            for size, part in parts.items() if part.get("sweep_per_batch")
        },
    }
    return {"dataset": "banking77", "model": setup.get("model"), "dev_choice": choice,
            "dev": dev_record["dev"] if dev_record else None, "batch_sizes": parts, "summary": summary, "setup": setup}


def write(result: dict, args: argparse.Namespace) -> None:
    """The JSON (with the environment block) and, when a batch size is measured, the figure."""
    out = write_results(args.output, result, device=args.device)
    if result["batch_sizes"]:
        plot(result, Path(out).parent / ("early_exit_banking77.png" if not args.dry_run else "early_exit_dry_run.png"))


if __name__ == "__main__":
    main()
