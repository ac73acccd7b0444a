"""Evaluate a model on named tasks: each registry data set maps to its evaluator by task type."""

from __future__ import annotations

from contrastive_bert.data import get_spec, load_dataset
from contrastive_bert.evaluation.classification import evaluate_classification
from contrastive_bert.evaluation.retrieval import evaluate_answer_selection
from contrastive_bert.evaluation.sts import evaluate_sts


def _pair_binary_as_sts(dataset):
    """MRPC as STS: the binary label is the gold score (Spearman of cosine vs paraphrase label)."""
    return dataset.map(lambda row: {"score": float(row["label"])}).remove_columns("label")


def check_tasks(tasks: list[str]) -> list[str]:
    """Validate task names (registry data sets) before any model is loaded."""
    if not tasks:
        raise ValueError("tasks: expected at least one task name")
    for task in tasks:
        get_spec(task)
    return list(tasks)


def evaluate_split(model, task: str, data, split: str = "test", batch_size: int = 64) -> dict:
    """Scores of ``model`` on ``data[split]`` of the registry data set ``task`` (``data`` as loaded;
    classification fits its probe on ``data["train"]``)."""
    spec = get_spec(task)
    if split not in data:
        raise ValueError(f"split: {task!r} has splits {list(data)}, not {split!r}")
    if spec.task_type == "pair-score":
        return evaluate_sts(model, data[split], batch_size=batch_size)
    if spec.task_type == "pair-binary":
        return evaluate_sts(model, _pair_binary_as_sts(data[split]), batch_size=batch_size)
    if spec.task_type == "classification":
        return evaluate_classification(model, data["train"], data[split], batch_size=batch_size)
    return evaluate_answer_selection(model, data[split], batch_size=batch_size)


def evaluate_task(model, task: str, data_dir: str | None = None, split: str = "test", batch_size: int = 64) -> dict:
    """Scores of ``model`` on one registry data set's ``split`` (x100, with ``main_score``)."""
    get_spec(task)
    return evaluate_split(model, task, load_dataset(task, data_dir=data_dir), split, batch_size=batch_size)


def evaluate_tasks(model, tasks: list[str], data_dir: str | None = None, split: str = "test", batch_size: int = 64) -> dict[str, dict]:
    """``{task: {"main_score": x, <metric>: ...}}`` for every task in ``tasks``."""
    return {task: evaluate_task(model, task, data_dir=data_dir, split=split, batch_size=batch_size) for task in check_tasks(tasks)}
