"""How long ``contrastive-bert --help`` takes, and which heavy libraries it imports (none should).

Runs the console script and ``python -m contrastive_bert.cli`` with ``--help`` N times each
(after one untimed warm-up run for the file cache), reports the median wall time, and lists the
heavy top-level packages that ``python -X importtime`` shows being imported by ``--help``.

    OMP_NUM_THREADS=1 .venv/bin/python eval/bench_cli_startup.py --runs 15
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from contrastive_bert.benchmarking import add_common_arguments, setup_from_args, write_results

HEAVY = ("torch", "transformers", "sentence_transformers", "datasets", "mteb", "faiss", "sklearn", "numpy", "tqdm")
RESULT = Path(__file__).resolve().parent / "results" / "cli_startup.json"


def _time(argv: list[str], runs: int) -> list[float]:
    subprocess.run(argv, check=True, capture_output=True)  # warm-up
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        seconds.append(time.perf_counter() - start)
    return seconds


def heavy_imports(argv: list[str]) -> list[str]:
    """Heavy top-level packages imported by ``argv`` (a ``python ...`` command), from ``-X importtime``."""
    stderr = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], check=True, capture_output=True, text=True).stderr
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in stderr.splitlines() if line.startswith("import time:")}
    return sorted(imported & set(HEAVY))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser, output=RESULT)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args(argv)
    setup_from_args(args)
    if args.dry_run:
        args.runs = 1
    script = str(Path(sys.executable).with_name("contrastive-bert"))
    commands = {"console script": [script, "--help"], "python -m contrastive_bert.cli": [sys.executable, "-m", "contrastive_bert.cli", "--help"]}
    results = {}
    for name, argv in commands.items():
        seconds = _time(argv, args.runs)
        results[name] = {"command": " ".join(Path(argv[0]).name if i == 0 else a for i, a in enumerate(argv)),
                         "median_s": round(statistics.median(seconds), 4), "min_s": round(min(seconds), 4),
                         "max_s": round(max(seconds), 4), "runs": args.runs}
        print(f"{name:<32} median {results[name]['median_s']:.3f} s  (min {results[name]['min_s']:.3f}, max {results[name]['max_s']:.3f})")
    heavy = heavy_imports([sys.executable, "-m", "contrastive_bert.cli", "--help"])
    print(f"heavy packages imported by --help: {', '.join(heavy) or 'none'}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    write_results(args.output, {"benchmark": "cli_startup", "budget_s": 0.5, "results": results,
                                "heavy_imports": heavy, "load_average_1min": load})
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
