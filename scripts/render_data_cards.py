"""The data cards data/<name>.md and their index data/README.md, written from each built-in data
set's DatasetSpec (contrastive_bert/data/sets/*.py) by scripts/render_docs.py, so a card cannot drift
from the spec the loader reads."""

from __future__ import annotations

import inspect
import textwrap
from typing import TYPE_CHECKING

from render_values import GENERATED, table

if TYPE_CHECKING:  # the package loads only when a card is written
    from contrastive_bert.data.spec import DatasetSpec

USED_FOR = {
    "pair-score": "STS evaluation (cosine Spearman x100); CoSENT training on the scores; positive pairs "
                  "(score >= 4/5) for the pair losses.",
    "pair-binary": "positive pairs (label 1) for the pair losses; pair evaluation by cosine Spearman against the labels.",
    "classification": "classification by logistic regression on frozen embeddings (MTEB protocol) and k-NN; "
                      "labelled training rows for ACL / CE; zero-shot classification by label names.",
    "reranking": "reranking evaluation (MRR/MAP over each question's candidates; questions without a correct "
                 "candidate are skipped); (question, correct answer) pairs, and with `labelled_negatives` "
                 "(question, answer, wrong candidate) triplets, for the pair losses.",
    "retrieval": "retrieval evaluation (nDCG@10 over the whole corpus, the MTEB protocol); (query, relevant "
                 "document) pairs for the pair losses.",
    "pairs": "training rows for the pair losses.",
    "triplets": "training rows for the pair losses, with hard negatives.",
}


# The task types contrastive_bert/data/dev_split.py carves a validation split for, and how.
DEV_SPLIT_BY = {"classification": "stratified by label", "retrieval": "by query, with all their judgements"}


def _first_paragraph(doc: str | None) -> str:
    return " ".join(inspect.cleandoc(doc).split("\n\n")[0].split()).replace("``", "`") if doc else ""


def data_card(spec: DatasetSpec, module_doc: str | None) -> str:
    """The markdown card of one DatasetSpec."""
    from contrastive_bert.data.schemas import TASK_COLUMNS

    title = _first_paragraph(module_doc).split(":")[0] or spec.description
    lines = [f"# `{spec.name}`: {title}", "",
             GENERATED.format(source=f"contrastive_bert/data/sets/{spec.name}.py", edit="that file").rstrip(), "",
             f"{spec.description}.", "",
             f"- **Defined in**: `contrastive_bert/data/sets/{spec.name}.py` (its `DatasetSpec` and the reader of its original files)",
             f"- **Task type**: `{spec.task_type}` (columns: {', '.join(TASK_COLUMNS[spec.task_type])}); "
             f"main score: `{spec.main_score}`" if spec.main_score else f"- **Task type**: `{spec.task_type}`"]
    if spec.label_names:
        lines.append(f"- **Labels** (id order): {', '.join(spec.label_names)}")
    elif spec.read_label_names is not None:
        lines.append(f"- **Labels**: {_first_paragraph(spec.read_label_names.__doc__) or 'read from the local files'}")
    if spec.files:
        files = ", ".join(f"{split} `{spec.folder}/{name}`" for split, name in spec.files.items())
        lines.append(f"- **Local files** (under the data root): {files}")
        if spec.read_file is not None and spec.read_file.__doc__:
            lines.append(f"- **File format**: {_first_paragraph(spec.read_file.__doc__)}")
        how = DEV_SPLIT_BY.get(spec.task_type)
        if how and "validation" not in spec.files and "train" in spec.files and getattr(spec, "dev_share", 0):
            lines.append(f"- **Validation split**: none in the source: {100 * spec.dev_share:g}% of train held out {how} "
                         f"(seed {getattr(spec, 'dev_seed', 0)}; `contrastive_bert/data/dev_split.py`), and train loses those rows")
    if spec.hub_id:
        config = f", config `{spec.hub_config}`" if spec.hub_config else ""
        revision = f"revision `{spec.hub_revision}`" if spec.hub_revision else "revision not pinned (the hub's default branch)"
        splits = f"; our split <- hub split: {', '.join(f'{a} <- {b}' for a, b in spec.hub_splits.items())}" if spec.hub_splits else ""
        lines.append(f"- **Hugging Face hub** (used when no data root is given): `{spec.hub_id}`{config}, {revision}{splits}")
    else:
        lines.append("- **Hugging Face hub**: none: local files only")
    if spec.mteb is not None:
        stock = f" (stock task over the same data: `{spec.mteb.stock_task}`)" if spec.mteb.stock_task else ""
        lines.append(f"- **mteb**: local task `{spec.mteb.task_name}`{stock}; domains {', '.join(spec.mteb.domains)}")
    lines.append(f"- **Licence**: {spec.licence or 'not stated'}")
    if spec.reference:
        lines.append(f"- **Reference**: {spec.reference}")
    lines.append(f"- **Used for**: {USED_FOR.get(spec.task_type, '')}")
    lines += ["", "```python", "from contrastive_bert.data import load_dataset",
              f'ds = load_dataset("{spec.name}", data_dir="../shared/data")', "```"]
    if spec.citation:
        lines += ["", "## Citation", "", "```bibtex", spec.citation.strip(), "```"]
    return "\n".join(lines) + "\n"


DATA_INDEX_TAIL = """
## Your own data

`contrastive_bert.data.load_custom_dataset(source, task_type, columns={...})` reads a CSV, TSV,
JSON Lines or parquet file, or any `datasets` name, maps its columns onto one of the schemas
and validates it (missing columns, empty split, non-numeric or out-of-range scores, labels
outside the label set: each a `ValueError` before any model loads).

A data file is accepted wherever a data-set name is (`train --datasets`, `eval --tasks`,
`mine --dataset`): `.jsonl`, `.json`, `.csv`, `.tsv` or `.parquet`, its format inferred from its
columns: `triplets` (anchor, positive, negative: `contrastive-bert mine`'s output), `pairs`
(anchor, positive), `pair-score` (sentence1, sentence2, score), `labelled` (text, label). In
Python, `resolve_dataset_argument(path, format=..., columns={...})` gives them explicitly.
"""


def data_index(specs: list[DatasetSpec]) -> str:
    """data/README.md: one row per data set, then the notes on users' own files."""
    rows = [[f"[`{spec.name}`]({spec.name}.md)", f"`{spec.task_type}`", spec.description, ", ".join(spec.splits) or "hub",
             spec.licence or "not stated"] for spec in specs]
    head = textwrap.dedent("""\
        # Data sets

        Cards for the data sets of `contrastive_bert.data.REGISTRY`, one `DatasetSpec` each in
        `contrastive_bert/data/sets/<name>.py` (adding one: `docs/adding_a_dataset.md`), each card
        written from its spec by `scripts/render_docs.py`. No third-party data lives in this
        repository: the loaders read the original files from a local data root (`--data-dir`, or
        `CONTRASTIVE_BERT_DATA`; the README's commands use `../shared/data`, whose README gives the
        row counts and sources) or, online, from the hub id and revision named on each card. Without
        a data root and offline, loading stops with one line naming the data set, the hub id, and
        `--data-dir` / `CONTRASTIVE_BERT_DATA` as the fix.

        """)
    return (GENERATED.format(source="contrastive_bert/data/sets/*.py", edit="those files or scripts/render_docs.py")
            + head + table(["name", "task type", "what", "local files", "licence"], rows) + "\n" + DATA_INDEX_TAIL)


def builtin_specs() -> list[tuple[DatasetSpec, str | None]]:
    """The package's own data sets (contrastive_bert/data/sets/*.py), in name order."""
    import importlib
    import pkgutil

    import contrastive_bert.data.sets as sets

    modules = [importlib.import_module(f"{sets.__name__}.{m.name}") for m in pkgutil.iter_modules(sets.__path__)
               if not m.name.startswith("_")]
    return sorted(((m.DATASET, m.__doc__) for m in modules if hasattr(m, "DATASET")), key=lambda pair: pair[0].name)
