"""What a user gets from ``contrastive-bert train --datasets <retrieval set>`` with no other flag.

Runs the console script exactly so (only ``--output-dir`` added, into a scratch folder, and the
thread count through ``OMP_NUM_THREADS``), then records what the run wrote: the recipe it derived
from the data, test nDCG@10 and the rest before and after, the mining report, the training
seconds and the command's wall time (imports, mining, scoring and training together). The README's
sentence on the default run quotes this file; eval/bench_retrieval.py measures the same recipe
against the alternatives.

    OMP_NUM_THREADS=2 .venv/bin/python eval/bench_default_run.py --datasets scifact

A data set already in the output with the same derived recipe is skipped (``--again`` reruns it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from contrastive_bert.benchmarking import add_common_arguments, setup_from_args, write_results

RESULT = Path(__file__).resolve().parent / "results" / "default_run.json"
METRICS = ("ndcg_at_10", "map_at_100", "mrr_at_10", "recall_at_100")
RETRIEVAL_SETS = ("scifact", "nfcorpus")


def command(dataset: str, output_dir: Path) -> list[str]:
    """The user's command, with the run written to ``output_dir`` instead of ``output/``."""
    return [str(Path(sys.executable).with_name("contrastive-bert")), "train", "--datasets", dataset, "--output-dir", str(output_dir)]


def derived_recipe(dataset: str) -> dict:
    """The recipe ``train --datasets dataset`` runs, without loading anything (for the skip check)."""
    from contrastive_bert.cli import build_cli
    from contrastive_bert.cli.train import recipe_from_args

    recipe = recipe_from_args(build_cli().parse_args(["train", "--datasets", dataset, "--output-dir", "unused"])).recorded()
    return {k: v for k, v in recipe.items() if k not in ("output_dir", "data_dir")}


def run(dataset: str, threads: int, data_dir: str | None) -> dict:
    """One default run of ``dataset`` in a scratch folder; its record."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    if data_dir:
        env["CONTRASTIVE_BERT_DATA"] = data_dir
    scratch = Path(tempfile.mkdtemp(prefix="default-run-"))
    try:
        argv = command(dataset, scratch / "run")
        start = time.perf_counter()
        subprocess.run(argv, check=True, env=env)
        wall = time.perf_counter() - start
        results = json.loads((scratch / "run" / "results.json").read_text())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    before, after = results["before"][dataset], results["after"][dataset]
    recipe = {k: v for k, v in results["recipe"].items() if k not in ("output_dir", "data_dir")}
    return {
        "command": f"contrastive-bert train --datasets {dataset}", "threads": threads, "derived": derived_recipe(dataset), "recipe": recipe,
        "before": {m: before[m] for m in METRICS}, "after": {m: after[m] for m in METRICS},
        "change": {m: after[m] - before[m] for m in METRICS},
        "train_rows": results["train_rows"], "steps": results["global_step"], "train_seconds": results["train_seconds"],
        "wall_seconds": wall, "mining": (results.get("corpus_negatives") or {}).get("mining", {}).get(dataset),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, output=RESULT)
    parser.add_argument("--datasets", default="scifact", help=f"comma-separated, among {', '.join(RETRIEVAL_SETS)} (default: scifact)")
    parser.add_argument("--again", action="store_true", help="rerun a data set already in the output")
    args = parser.parse_args(argv)
    datasets = [name for name in args.datasets.split(",") if name]
    unknown = [name for name in datasets if name not in RETRIEVAL_SETS]
    if not datasets or unknown:
        raise ValueError(f"--datasets: expected some of {list(RETRIEVAL_SETS)}, got {args.datasets!r}")
    setup_from_args(args)
    output = Path(args.output)
    runs = json.loads(output.read_text()).get("runs", {}) if output.is_file() else {}
    for dataset in datasets:
        if not args.again and dataset in runs and runs[dataset]["derived"] == derived_recipe(dataset):
            print(f"{dataset}: already measured with this recipe (--again reruns it)")
            continue
        runs[dataset] = run(dataset, args.threads, args.data_dir)
        print(f"{dataset}: test nDCG@10 {runs[dataset]['before']['ndcg_at_10']:.2f} -> {runs[dataset]['after']['ndcg_at_10']:.2f} "
              f"({runs[dataset]['wall_seconds'] / 60:.1f} min in all)")
        write_results(output, {"benchmark": "default_run", "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
