"""Evaluate a model on data sets: each data set's task type picks its evaluator, its ``main_score``
field names the metric reported as ``main_score``. Tasks are registry names or data files."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence

from tqdm.auto import tqdm

from contrastive_bert.data import get_dataset, load_dataset
from contrastive_bert.data.beir import RetrievalData
from contrastive_bert.data.spec import DatasetSpec

logger = logging.getLogger(__name__)


def _pair_binary_as_sts(dataset):
    """MRPC as STS: the binary label is the gold score (Spearman of cosine vs paraphrase label)."""
    return dataset.map(lambda row: {"score": float(row["label"])}).remove_columns("label")


# The evaluators import their scoring libraries (scikit-learn, scipy) when first called, so that
# checking task names before a run stays cheap.
def _sts(model, spec, data, split, **kwargs):
    from contrastive_bert.evaluation.sts import evaluate_sts

    return evaluate_sts(model, data[split], **kwargs)


def _pair_binary(model, spec, data, split, **kwargs):
    from contrastive_bert.evaluation.sts import evaluate_sts

    return evaluate_sts(model, _pair_binary_as_sts(data[split]), **kwargs)


def _classification(model, spec, data, split, **kwargs):
    from contrastive_bert.evaluation.classification import evaluate_classification

    if data["train"] is data[split]:
        raise ValueError(
            f"tasks: {spec.name!r} has no training rows apart from its {split!r} rows to fit the classifier on; "
            "register it with separate train and test files (docs/adding_a_dataset.md)"
        )
    return evaluate_classification(model, data["train"], data[split], **kwargs)


def _reranking(model, spec, data, split, **kwargs):
    from contrastive_bert.evaluation.retrieval import evaluate_answer_selection

    return evaluate_answer_selection(model, data[split], **kwargs)


def _retrieval(model, spec, data, split, batch_size: int = 64, show_progress_bar: bool = False, embeddings_dir=None,
               devices=None):
    from contrastive_bert.evaluation.beir_evaluation import evaluate_retrieval_splits

    retrieval = data if isinstance(data, RetrievalData) else RetrievalData.from_splits(data)
    scores = evaluate_retrieval_splits(model, retrieval, [split], batch_size=batch_size,
                                       show_progress_bar=show_progress_bar, embeddings_dir=embeddings_dir,
                                       devices=devices)[split]
    return {k: v for k, v in scores.items() if k != "main_score"}


# task type -> evaluator(model, spec, data, split, batch_size=..., show_progress_bar=...)
EVALUATORS = {"pair-score": _sts, "pair-binary": _pair_binary, "classification": _classification, "reranking": _reranking,
              "retrieval": _retrieval}


def _evaluable(task: str | DatasetSpec) -> DatasetSpec:
    spec = get_dataset(task)
    if spec.task_type not in EVALUATORS:
        raise ValueError(
            f"tasks: {spec.name!r} is a {spec.task_type} data set (training rows); evaluation needs a "
            f"{', '.join(EVALUATORS)} data set"
        )
    return spec


def check_tasks(tasks: Sequence[str]) -> list[str]:
    """Validate task names (registry data sets or data files) before any model is loaded."""
    if not tasks:
        raise ValueError("tasks: expected at least one task name")
    for task in tasks:
        _evaluable(task)
    return list(tasks)


def default_progress_bar() -> bool:
    """Progress bars are shown when stderr is a terminal."""
    return sys.stderr.isatty()


def evaluate_split(
    model, task: str | DatasetSpec, data, split: str = "test", batch_size: int = 64, show_progress_bar: bool = False,
    embeddings_dir=None, devices=None,
) -> dict:
    """Scores of ``model`` on ``data[split]`` of the data set ``task`` (``data`` as loaded, or a
    retrieval set's :class:`RetrievalData`; classification fits its probe on ``data["train"]``),
    x100, ``main_score`` = the data set's ``main_score`` metric. ``embeddings_dir``: a retrieval
    set's corpus embeddings are kept there (read back when ``model`` encoded them before);
    ``devices``: a retrieval set's corpus is encoded on these, one process each."""
    spec = _evaluable(task)
    splits = list(data.qrels) if isinstance(data, RetrievalData) else list(data)
    if split not in splits:
        raise ValueError(f"split: {spec.name!r} has splits {splits}, not {split!r}")
    options = {}
    if spec.task_type == "retrieval":
        options = {name: value for name, value in (("embeddings_dir", embeddings_dir), ("devices", devices)) if value is not None}
    scores = EVALUATORS[spec.task_type](model, spec, data, split, batch_size=batch_size, show_progress_bar=show_progress_bar,
                                        **options)
    if spec.main_score not in scores:
        raise ValueError(f"main_score: {spec.name!r} names {spec.main_score!r}, but its evaluator reports {sorted(scores)}")
    return {"main_score": scores[spec.main_score], **{k: v for k, v in scores.items() if k != "main_score"}}


def cap_rows(data, rows: int, seed: int = 0):
    """An evaluation sample: every split of a loaded data set cut to ``rows`` rows, shuffled with
    ``seed`` (a classification test split is often sorted by label: its first rows would hold a
    few classes); a retrieval set (its ``DatasetDict`` or :class:`RetrievalData`) keeps its whole
    corpus and ``rows`` queries per qrels split (:meth:`RetrievalData.with_queries_capped`)."""
    if isinstance(data, RetrievalData):
        return data.with_queries_capped(rows, seed)
    if "corpus" in data and "queries" in data:
        return RetrievalData.from_splits(data).with_queries_capped(rows, seed)
    capped = {}  # splits read from one file stay one object (a classifier never fits on its test rows)
    for split in data.values():
        if id(split) not in capped:
            capped[id(split)] = split.shuffle(seed=seed).select(range(min(rows, len(split))))
    return {name: capped[id(split)] for name, split in data.items()}


def evaluate_task(
    model, task: str | DatasetSpec, data_dir: str | None = None, split: str = "test", batch_size: int = 64,
    show_progress_bar: bool = False,
) -> dict:
    """Scores of ``model`` on one data set's ``split`` (x100, with ``main_score``)."""
    _evaluable(task)
    data = load_dataset(task, data_dir=data_dir)
    return evaluate_split(model, task, data, split, batch_size=batch_size, show_progress_bar=show_progress_bar)


def evaluate_tasks(
    model,
    tasks: Sequence[str],
    data_dir: str | None = None,
    split: str = "test",
    batch_size: int = 64,
    data: Mapping[str, object] | None = None,
    show_progress_bar: bool | None = None,
    embeddings_dir=None,
    devices=None,
) -> dict[str, dict]:
    """``{task: {"main_score": x, <metric>: ...}}`` for every task in ``tasks``.

    ``data`` holds already-loaded data sets by task name (the others are loaded here);
    ``show_progress_bar``: one bar over the tasks plus the encoding bars (default: when stderr
    is a terminal); ``embeddings_dir``: where retrieval corpora's embeddings are kept; ``devices``: what
    encodes them (:func:`evaluate_split`)."""
    tasks = check_tasks(tasks)
    show = default_progress_bar() if show_progress_bar is None else show_progress_bar
    data = dict(data or {})
    results = {}
    for task in tqdm(tasks, desc="Evaluating", unit="task", disable=not show):
        loaded = data[task] if task in data else load_dataset(task, data_dir=data_dir)
        results[task] = evaluate_split(model, task, loaded, split, batch_size=batch_size, show_progress_bar=show,
                                       embeddings_dir=embeddings_dir, devices=devices)
        logger.info("%s %s: main_score %.2f", task, split, results[task]["main_score"])
    return results
