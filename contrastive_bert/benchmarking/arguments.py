"""The flags every benchmark in ``eval/`` shares, and the one setup a benchmark's ``main`` calls.

``add_common_arguments(parser, output=..., run_log=...)`` adds ``--device``, ``--threads``,
``--data-dir``, ``--seeds``, ``--only``/``--methods``, ``--output``, ``--max-minutes``,
``--dry-run`` (with ``--max-steps`` / ``--eval-rows``), ``-v``/``-q`` and, for a resumable benchmark, ``--run-log`` and ``--summary-only``;
``setup_from_args(args)`` then sets logging (the package's one setup), torch threads, the device
and the global seeds, and returns the wall-clock :class:`Budget`. Nothing here imports torch at
import time, so ``--help`` is fast.
"""

from __future__ import annotations

import argparse
import os
import random
from collections.abc import Sequence
from pathlib import Path

from contrastive_bert.benchmarking.budget import Budget
from contrastive_bert.logging_setup import configure_logging

DRY_RUN_STEPS = 2  # optimizer steps per run under --dry-run
DRY_RUN_ROWS = 32  # evaluation (and at most training) rows per split under --dry-run


def device_name(text: str) -> str:
    """argparse ``type`` of ``--device``: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``."""
    value = text.strip().lower()
    if value in ("cpu", "cuda", "auto") or (value.startswith("cuda:") and value[5:].isdigit()):
        return value
    raise argparse.ArgumentTypeError(f"expected cpu, cuda, cuda:N or auto, got {text!r}")


def _seed_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole-number seeds such as '0 1 2' or '0,1,2', got {text!r}") from None


def _name_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


class _Extend(argparse.Action):
    """``--seeds 0 1 2`` and ``--seeds 0,1,2`` alike: flattens the lists parsed per word."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, [item for value in values for item in value])


def add_common_arguments(
    parser: argparse.ArgumentParser,
    *,
    output: str | Path,
    run_log: str | Path | None = None,
    seeds: Sequence[int] | None = None,
    methods: Sequence[str] | None = None,
    device: str = "cpu",
) -> argparse.ArgumentParser:
    """Add the shared benchmark flags to ``parser`` (defaults: this benchmark's ``output`` file,
    ``run_log`` for a resumable one, ``seeds``, the ``methods`` that ``--only`` may name)."""
    parser.add_argument("--device", type=device_name, default=device,
                        help=f"torch device: cpu, cuda, cuda:N or auto (cuda when visible) (default: {device})")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: $OMP_NUM_THREADS, else 1)")
    parser.add_argument("--data-dir", default=None, help="folder holding the data sets (default: $CONTRASTIVE_BERT_DATA)")
    parser.add_argument("--seeds", type=_seed_list, nargs="+", action=_Extend, default=list(seeds) if seeds is not None else None,
                        help=f"seeds, e.g. '0 1 2' or '0,1,2' (default: {','.join(map(str, seeds)) if seeds else 'the protocol'})")
    known = f"; one of {', '.join(methods)}" if methods else ""
    parser.add_argument("--only", "--methods", dest="only", type=_name_list, default=None,
                        help=f"comma-separated methods (or blocks) to run, in this order (default: all){known}")
    parser.add_argument("--output", default=str(output), help=f"results JSON (default: {output})")
    if run_log is not None:
        parser.add_argument("--run-log", default=str(run_log),
                            help=f"append-only run log; runs already in it are skipped (default: {run_log})")
        parser.add_argument("--summary-only", action="store_true", help="rebuild the results JSON from the run log and exit")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="wall-clock limit: no run is started that is not expected to finish within it")
    parser.add_argument("--dry-run", action="store_true",
                        help=f"smoke test: {DRY_RUN_STEPS} training steps per run and at most {DRY_RUN_ROWS} rows per "
                             "evaluation split (numbers meaningless; recorded in every run, never merged)")
    parser.add_argument("--max-steps", type=int, default=None, help="cap every run's optimizer steps (smoke tests only; recorded)")
    parser.add_argument("--eval-rows", type=int, default=None, help="cap the rows of every evaluation split (smoke tests only; recorded)")
    verbosity = parser.add_mutually_exclusive_group()
    verbosity.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=1, default=0, help="log debug messages too")
    verbosity.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=-1, default=0, help="log errors only")
    parser.set_defaults(known_methods=tuple(methods) if methods else None)
    return parser


def resolve_device(name: str) -> str:
    """``auto`` -> ``cuda`` when visible else ``cpu``; ``ValueError`` for ``cuda`` without one."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device: {name!r} asked for, but torch sees no CUDA device (use --device cpu or auto)")
    return name


def setup_from_args(args: argparse.Namespace) -> Budget:
    """Logging, torch threads, the device (``args.device`` resolved), ``--only`` checked against
    the known methods, the global seeds (random, numpy, torch: the first of ``args.seeds``, else 0),
    ``--dry-run`` as ``max_steps``/``eval_rows`` caps; returns the wall-clock budget (also set as ``args.budget``)."""
    configure_logging(getattr(args, "verbosity", 0))
    import numpy as np
    import torch

    threads = args.threads or int(os.environ.get("OMP_NUM_THREADS", "1") or 1)
    if threads < 1:
        raise ValueError(f"--threads: expected a positive number, got {threads}")
    torch.set_num_threads(threads)
    args.threads = threads
    args.device = resolve_device(args.device)
    known = getattr(args, "known_methods", None)
    if args.only is not None:
        if not args.only:
            raise ValueError("--only: expected at least one name")
        unknown = [name for name in args.only if known and name not in known]
        if unknown:
            raise ValueError(f"--only: unknown {', '.join(unknown)}; expected names among {', '.join(known)}")
    if args.seeds is not None and not args.seeds:
        raise ValueError("--seeds: expected at least one seed")
    seed = args.seeds[0] if args.seeds else 0
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if args.dry_run:
        args.max_steps = min(args.max_steps or DRY_RUN_STEPS, DRY_RUN_STEPS)
        args.eval_rows = min(args.eval_rows or DRY_RUN_ROWS, DRY_RUN_ROWS)
    for flag in ("max_steps", "eval_rows"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise ValueError(f"--{flag.replace('_', '-')}: expected a positive number, got {value}")
    args.budget = Budget(args.max_minutes)
    return args.budget


def selected(args: argparse.Namespace, names: Sequence[str]) -> list[str]:
    """``names`` narrowed to ``--only`` (in ``--only``'s order), or all of them."""
    if args.only is None:
        return list(names)
    return [name for name in args.only if name in names]


def cap_rows(data, rows: int | None, splits: Sequence[str] = ("validation", "test")):
    """``data`` with at most ``rows`` rows (the first ones; None: unchanged): a ``Dataset``, or the
    named ``splits`` of a ``DatasetDict`` (the others as they are) — what ``--eval-rows`` caps."""
    if rows is None:
        return data
    if hasattr(data, "select") and not hasattr(data, "keys"):
        return data.select(range(min(rows, len(data))))
    import datasets

    return datasets.DatasetDict({name: cap_rows(split, rows) if name in splits else split for name, split in data.items()})
