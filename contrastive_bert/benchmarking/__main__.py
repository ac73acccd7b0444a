"""``python -m contrastive_bert.benchmarking merge OUT_DIR eval/results/``: see :mod:`.merge`."""

from __future__ import annotations

import argparse
import json
import sys

from contrastive_bert.benchmarking.merge import merge
from contrastive_bert.logging_setup import configure_logging


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m contrastive_bert.benchmarking")
    commands = parser.add_subparsers(dest="command", required=True)
    merging = commands.add_parser("merge", help="append run logs brought back from another machine, then re-summarise")
    merging.add_argument("source", help="folder of run logs (*.jsonl) and manifest.json, e.g. the bundle's out/")
    merging.add_argument("destination", help="local results folder, e.g. eval/results/")
    merging.add_argument("--repo", default=".", help="repository root holding eval/ (default: .)")
    merging.add_argument("--no-summary", action="store_true", help="merge the logs only")
    args = parser.parse_args(argv)
    configure_logging(0)
    try:
        report = merge(args.source, args.destination, repo=args.repo, summarise=not args.no_summary)
    except ValueError as error:
        print(f"merge: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
