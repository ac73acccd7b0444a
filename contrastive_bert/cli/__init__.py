"""``contrastive-bert`` command line: one module per subcommand, each with ``add_parser(subparsers)``.

As in mteb's CLI: ``build_cli()`` builds the parser (nothing runs at import time, and nothing
imports torch until a subcommand runs) and each subcommand sets ``func`` so handlers can be
tested without a subprocess. Shared flags come from :mod:`contrastive_bert.cli.arguments`.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import re
import sys
from collections.abc import Sequence

from contrastive_bert.cli.arguments import add_verbosity_arguments
from contrastive_bert.logging_setup import LOG_LEVELS, configure_logging  # noqa: F401 (re-exported)

# Each name is a module ``contrastive_bert.cli.<name>`` exposing ``add_parser(subparsers)``.
COMMANDS: tuple[str, ...] = ("train", "evaluate", "mine", "search", "early_exit", "classify")


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (``prog: error: ...``) like every other error, not the usage text."""

    def error(self, message: str):
        hint = _command_hint(message, getattr(self, "command_names", ()))
        self.exit(2, f"{self.prog}: error: {message}{hint} (see {self.prog} --help)\n")

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but a flag the subcommand does not know is reported by that subcommand (its
        name and help, not the top level's) with the flag it has that was probably meant."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            owner = getattr(self, "command_parsers", {}).get(getattr(parsed, "command", None), self)
            owner.error(f"unrecognized arguments: {' '.join(extras)}{_flag_hint(extras, owner)}")
        return parsed


# what users of sentence-transformers / mteb type for a subcommand that has another name here
COMMAND_ALIASES = {"evaluate": "eval", "evaluation": "eval", "run": "eval", "mteb": "eval", "fit": "train",
                   "early_exit": "early-exit", "earlyexit": "early-exit", "exit": "early-exit", "predict": "classify",
                   "zero-shot": "classify", "retrieve": "search", "index": "search", "hard-negatives": "mine",
                   "mine-hard-negatives": "mine"}


def _command_hint(message: str, commands: Sequence[str]) -> str:
    """'. Did you mean 'eval'?' for an unknown subcommand close to (or commonly named for) one of ``commands``."""
    match = re.match(r"argument COMMAND: invalid choice: '?([^' ]*)'?", message)
    if not match or not commands:
        return ""
    typed = match.group(1).lower()
    guess = COMMAND_ALIASES.get(typed) or next(iter(difflib.get_close_matches(typed, commands, n=1, cutoff=0.6)), None)
    return f". Did you mean '{guess}'?" if guess in commands else ""


# what users of the Hugging Face Trainer and sentence-transformers type for a flag that has another name here
FLAG_ALIASES = {"--lr": "--learning-rate", "--num-train-epochs": "--epochs", "--num-epochs": "--epochs",
                "--per-device-train-batch-size": "--batch-size", "--train-batch-size": "--batch-size",
                "--bs": "--batch-size", "--model-name": "--model", "--model-name-or-path": "--model",
                "--data": "--datasets", "--task": "--tasks", "--k": "--top-k", "--topk": "--top-k",
                "--queries": "--input", "--out": "--output", "--output-path": "--output",
                "--warmup": "--warmup-ratio", "--fp16": "--mixed-precision", "--bf16": "--mixed-precision"}


def _flag_hint(extras: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """'. Did you mean '--learning-rate'?' for the first unknown flag in ``extras`` that is close to, spelled
    with underscores for, or commonly named for one of ``parser``'s flags."""
    known = [option for action in parser._actions for option in action.option_strings if option.startswith("--")]
    for extra in extras:
        if not extra.startswith("--"):
            continue
        typed = extra.split("=", 1)[0].lower().replace("_", "-")
        guess = typed if typed in known else FLAG_ALIASES.get(typed)
        if guess not in known:
            guess = next(iter(difflib.get_close_matches(typed, known, n=1, cutoff=0.75)), None)
        if guess is not None:
            return f". Did you mean '{guess}'?"
    return ""


def build_cli() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="contrastive-bert",
        description="Train and evaluate sentence-embedding models with contrastive objectives.",
    )
    add_verbosity_arguments(parser, default=0)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        subparser = importlib.import_module(f"contrastive_bert.cli.{name}").add_parser(subparsers)
        if subparser is not None and not any("--verbose" in action.option_strings for action in subparser._actions):
            add_verbosity_arguments(subparser)
    parser.command_names = tuple(subparsers.choices)  # for the "did you mean" of an unknown command
    parser.command_parsers = dict(subparsers.choices)  # for the "did you mean" of an unknown flag
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_cli()
    args = parser.parse_args(argv)
    configure_logging(args.verbosity)
    try:
        result = args.func(args)
    except ValueError as error:
        print(f"contrastive-bert {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # train says more (its checkpoint); elsewhere one line, no traceback
        print(f"contrastive-bert {args.command}: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
