"""``contrastive-bert`` command line: one module per subcommand, each with ``add_parser(subparsers)``.

As in mteb's CLI: ``build_cli()`` builds the parser (nothing runs at import time) and
each subcommand sets ``func`` so handlers can be tested without a subprocess.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Each name is a module ``contrastive_bert.cli.<name>`` exposing ``add_parser(subparsers)``.
COMMANDS: tuple[str, ...] = ("train", "evaluate", "mine", "early_exit", "classify")


def build_cli() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="contrastive-bert",
        description="Train and evaluate sentence-embedding models with contrastive objectives.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"contrastive_bert.cli.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_cli()
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except ValueError as error:
        print(f"contrastive-bert {args.command}: error: {error}", file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
