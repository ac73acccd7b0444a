"""The tables of docs/results.md's "The corpus at scale" (eval/results/scale.json, eval/bench_scale.py):
index build and search, mining, encoding per backend with its quality cost, each stage's growth
exponent, and the CLI's own runs on a million documents. A cell shows what scale.json holds; a stage not run yet says so."""

from __future__ import annotations

from collections.abc import Mapping

from render_table import Column, benchmark_table
from render_values import Results, fmt

SCALE_MISSING = "*Not measured yet (`eval/bench_scale.py --stages {}`).*"


def _cells(results: Results, stage: str) -> list[Mapping]:
    if not results.has("scale"):
        return []
    return list((results["scale"].get("cells") or {}).get(stage) or [])


def _by_size(cells: list[Mapping], variant: str) -> dict[tuple, Mapping]:
    """Rows ordered by size, then variant (index type or backend)."""
    order = {"flat": 0, "ivf": 1, "hnsw": 2, "torch": 0, "torch-bf16": 1, "onnx": 2, "onnx-int8": 3}
    cells = sorted(cells, key=lambda c: (c.get("size", c.get("documents", 0)), order.get(c.get(variant), 9)))
    return {(f"{c.get('size', c.get('documents')):,}", c.get(variant)): c for c in cells}


def table_scale_index(results: Results) -> str:
    """scale.json ``cells.index``: per corpus size and index type, build and query seconds, recall of
    the approximate search against exact search, and memory."""
    cells = _cells(results, "index")
    if not cells:
        return SCALE_MISSING.format("index")
    columns = [Column("build, s", "build_seconds", ".1f"), Column("1,000 queries, s", "query_seconds", ".2f"),
               Column("recall@10", "recall_at_10", ".3f"), Column("recall@100", "recall_at_100", ".3f"),
               Column("index's own memory, MiB", "stage_mib", ".0f"), Column("peak RSS, MiB", "peak_rss_mib", ".0f")]
    return benchmark_table(_by_size(cells, "index_type"), columns, labels=lambda name: name, first=["documents", "index"])


def table_scale_mine(results: Results) -> str:
    """scale.json ``cells.mine``: mining 1,000 pairs against the corpus through each index."""
    cells = _cells(results, "mine")
    if not cells:
        return SCALE_MISSING.format("mine")
    columns = [Column("seconds", "seconds", ".1f"), Column("of which encoding the queries", "query_encode_seconds", ".1f"),
               Column("rows kept", "kept"), Column("recall@100", "recall_at_100", ".3f"),
               Column("own memory, MiB", "stage_mib", ".0f"), Column("peak RSS, MiB", "peak_rss_mib", ".0f")]
    return benchmark_table(_by_size(cells, "index_type"), columns, labels=lambda name: name, first=["documents", "index"])


def table_scale_encode(results: Results) -> str:
    """scale.json ``cells.encode`` and ``quality``: documents per second and memory per backend and
    corpus size, the SciFact test nDCG@10 of each backend and its difference from torch, and the
    million-document time extrapolated (not measured) from the largest cell."""
    cells = _cells(results, "encode")
    if not cells:
        return SCALE_MISSING.format("encode")
    quality = results["scale"].get("quality") or {}
    extrapolated = results["scale"].get("encoding_extrapolated") or {}
    columns = [Column("documents / s", "documents_per_second", ".1f"), Column("peak RSS, MiB", "peak_rss_mib", ".0f"),
               Column("SciFact test nDCG@10", lambda c: (quality.get(c["backend"]) or {}).get("ndcg_at_10"), ".2f"),
               Column("vs torch", lambda c: (quality.get(c["backend"]) or {}).get("minus_torch"), "+.2f"),
               Column("1M documents, h (extrapolated)",
                      lambda c: (extrapolated.get(c["backend"]) or {}).get("hours_from_largest_cell")
                      if c["documents"] == (extrapolated.get(c["backend"]) or {}).get("largest_cell_documents") else None, ".1f")]
    rows = {(size, f"{backend} (memory pattern on)" if cell.get("onnx_memory_pattern") else backend): cell
            for (size, backend), cell in _by_size(cells, "backend").items()}
    table = benchmark_table(rows, columns, labels=lambda name: name, first=["documents", "backend"])
    marked = any(cell.get("onnx_memory_pattern") for cell in cells)
    return table + "\n\n" + (ONNX_MEMORY_PATTERN_MARKED if marked else ONNX_MEMORY_PATTERN)


#: after the encode table: why the onnx cells run without ONNX Runtime's memory pattern, and (while any
#: is left) what a cell marked as measured with it means
ONNX_MEMORY_PATTERN = (
    "The onnx rows run without ONNX Runtime's memory pattern, a memory plan kept per input shape: length-sorted\n"
    "batches bring a new shape nearly every batch, and with it `onnx-int8`'s memory grew with the corpus\n"
    "(ONNX Runtime's memory arena stays).")
ONNX_MEMORY_PATTERN_MARKED = (
    "Rows marked *(memory pattern on)* were measured with ONNX Runtime's memory pattern, a memory plan\n"
    "kept per input shape: length-sorted batches bring a new shape nearly every batch, which is why\n"
    "`onnx-int8`'s memory grows with the corpus there. The encoder now turns it off (ONNX Runtime's memory arena\n"
    "stays); `--stages encode` measures those cells again, and each new cell replaces its marked one.")


def table_scale_growth(results: Results) -> str:
    """scale.json ``growth``: the fitted log-log slope of seconds and of the stage's own memory against
    the corpus size, per stage and variant (1: linear; 0: flat)."""
    growth = results["scale"].get("growth") if results.has("scale") else None
    if not growth:
        return SCALE_MISSING.format("index mine")
    rows = {(g["series"], g["variant"], f"{min(g['sizes']):,}-{max(g['sizes']):,}"): g for g in growth
            if g.get("seconds_exponent") is not None}
    columns = [Column("seconds ∝ size^", "seconds_exponent", lambda v: fmt(v, ".2f")),
               Column("own memory ∝ size^", "stage_memory_exponent", lambda v: fmt(v, ".2f"))]
    return benchmark_table(rows, columns, labels=lambda name: name, first=["stage", "variant", "sizes"])


CLI_RUNS = {"interrupted": "search, interrupted half-way (Ctrl-C)", "resumed": "search again: resumes, then searches",
            "encoded": "search: encodes, then searches",
            "read_back": "search a third time: the index read back", "mine": "mine, on the search's store"}


def table_scale_cli(results: Results) -> str:
    """scale.json ``cells.cli``: each CLI process of the cli stage (``search`` interrupted, resumed,
    read back; ``mine``) with its seconds and peak memory, resident and anonymous (what the process
    holds beside the embeddings mapped from disk)."""
    cells = _cells(results, "cli")
    if not cells:
        return SCALE_MISSING.format("cli")
    rows = {(f"{c['documents']:,}", CLI_RUNS.get(name, name)): {**run, "rows_mib": c["rows_mib"]}
            for c in cells for name, run in c["runs"].items()}
    columns = [Column("seconds", "seconds", ".0f"), Column("peak RSS, MiB", "peak_rss_mib", ".0f"),
               Column("peak anonymous, MiB", "peak_anon_mib", ".0f"), Column("embeddings on disk, MiB", "rows_mib", ".0f")]
    return benchmark_table(rows, columns, labels=lambda name: name, first=["documents", "run"])
