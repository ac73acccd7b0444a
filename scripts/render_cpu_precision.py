"""The table of docs/results.md's "The CPU at its limit" (eval/results/cpu_precision.json,
eval/bench_cpu_precision.py): per precision, seconds per training step, documents encoded per
second, and the FLOP rate of each against the CPU's peak for that precision."""

from __future__ import annotations

from render_table import Column, benchmark_table
from render_values import Results

PRECISION_LABELS = {"fp32": "fp32", "bf16": "bf16 (CPU autocast, AMX)"}


def table_cpu_precision(results: Results) -> str:
    """cpu_precision.json ``timing``: the timing pass (both precisions back to back on a quiet machine)."""
    timing = results["cpu_precision"].get("timing") if results.has("cpu_precision") else None
    if not timing:
        return "*The timing pass has not run yet (`eval/bench_cpu_precision.py --timing`).*"
    columns = [Column("s / training step (32 rows)", "median_step_seconds", ".2f"),
               Column("training GFLOP/s", "gflops_per_second", ".0f"),
               Column("of peak", "fraction_of_peak", "{:.0%}"),
               Column("documents / s encoded", "encoding.documents_per_second", ".1f"),
               Column("encoding GFLOP/s", "encoding.gflops_per_second", ".0f"),
               Column("of peak ", "encoding.fraction_of_peak", "{:.0%}"),
               Column("large matmul GFLOP/s", "matmul.gflops_per_second", ".0f"),
               Column("peak GFLOP/s", "peak_gflops", ".0f")]
    return benchmark_table(timing, columns, PRECISION_LABELS, first="precision")
