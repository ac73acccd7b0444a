"""The loop every grid benchmark runs: take the plan's next run, make it, log it, rebuild the results.

A benchmark on the shared protocol (:mod:`contrastive_bert.benchmarking.protocol`) gives its
:class:`~contrastive_bert.benchmarking.protocol.Grid`, its run log and how one run is made;
:func:`run_plan` does the rest, resumably: the plan is recomputed after every run (a method's other
seeds follow its dev choice), a ``--dry-run`` record never counts as a real run done
(:meth:`~contrastive_bert.benchmarking.run_log.RunLog.of_mode`), and under ``--max-runs`` the exit
status :data:`NOTHING_LEFT` ends a shell loop of one run per process once every planned run is in.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence

from contrastive_bert.benchmarking.budget import Budget
from contrastive_bert.benchmarking.protocol import Grid, Run
from contrastive_bert.benchmarking.run_log import RunLog

__all__ = ["NOTHING_LEFT", "run_plan"]

logger = logging.getLogger(__name__)

NOTHING_LEFT = 10  # exit status under --max-runs when every planned run is done (ends a shell loop)


def run_plan(
    plan: Grid,
    log: RunLog,
    methods: Sequence[str],
    args: argparse.Namespace,
    budget: Budget,
    make: Callable[[Run], dict],
    key: Callable[[Run], str],
    write_summary: Callable[[], None],
    report: Callable[[dict], str] = lambda record: "done",
) -> int:
    """Make the planned runs of ``methods`` one by one (``make(run)`` -> its record, appended under
    ``key(run)``), rebuilding the results after each, until none is left (returns
    :data:`NOTHING_LEFT` under ``args.max_runs``, else 0), ``args.max_runs`` runs are made, or the
    wall-clock ``budget`` leaves too little for the next (returns 0)."""
    runs = 0
    while True:
        todo = plan.plan(log.of_mode(args.dry_run), methods)
        if not todo:
            logger.info("every planned run is in the log")
            write_summary()
            return NOTHING_LEFT if args.max_runs is not None else 0
        if args.max_runs is not None and runs >= args.max_runs:
            break
        run = todo[0]
        if not budget.allows(run.method):
            logger.info("stopping: the wall-clock limit leaves too little for %s", run.method)
            break
        logger.info("run %s", key(run))
        with budget.timed(run.method):
            record = make(run)
        log.append(key(run), record)
        logger.info("%s: %s", key(run), report(record))
        runs += 1
        write_summary()
    write_summary()
    return 0
