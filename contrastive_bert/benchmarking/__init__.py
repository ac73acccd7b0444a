"""The benchmark harness shared by every script in ``eval/``.

- :class:`RunLog` (``run_log``): append-only JSON lines, one fsynced record per finished run,
  keyed by a stable string (or a dict, see :func:`run_key`); a torn last line is skipped.
- :func:`write_results` / :func:`write_json` (``results``): atomic, valid JSON (no NaN), with the
  :func:`environment` block; :func:`mean_std`, :func:`json_safe`.
- :func:`add_common_arguments` / :func:`setup_from_args` (``arguments``): the shared flags and setup.
- :class:`Budget` (``budget``): the ``--max-minutes`` wall-clock limit.
- :class:`Method` / :class:`Grid` / :func:`paired_difference` (``protocol``): the one protocol
  (configurations chosen on dev at the first seed, then the other seeds) and its result shape.
- :class:`RowsCache` (``rows_cache``): training rows kept on disk between a loop's processes.
- ``python -m contrastive_bert.benchmarking merge OUT_DIR eval/results/`` (``merge``).
"""

from contrastive_bert.benchmarking.arguments import (
    DRY_RUN_ROWS,
    DRY_RUN_STEPS,
    add_common_arguments,
    cap_rows,
    resolve_device,
    selected,
    setup_from_args,
)
from contrastive_bert.benchmarking.budget import Budget
from contrastive_bert.benchmarking.merge import merge, merge_run_log
from contrastive_bert.benchmarking.protocol import Grid, Method, Run, choose_on_dev, paired_difference
from contrastive_bert.benchmarking.results import environment, json_safe, mean_std, write_json, write_results
from contrastive_bert.benchmarking.run_log import RunLog, run_key

__all__ = [
    "DRY_RUN_ROWS", "DRY_RUN_STEPS", "Budget", "Grid", "Method", "Run", "RunLog", "add_common_arguments", "cap_rows",
    "choose_on_dev", "environment", "json_safe", "mean_std", "merge", "merge_run_log", "paired_difference",
    "resolve_device", "run_key", "selected", "setup_from_args", "write_json", "write_results",
]
