"""A sentence-transformers evaluator that scores a registry task, so that dev evaluation during
training and the final evaluation compute the same numbers."""

from __future__ import annotations

from sentence_transformers.base.evaluation.evaluator import BaseEvaluator

from contrastive_bert.data import get_spec, load_dataset
from contrastive_bert.evaluation.tasks import evaluate_split


class TaskEvaluator(BaseEvaluator):
    """Evaluate on ``split`` of the registry data set ``task`` (STS Spearman, accuracy or MRR)."""

    def __init__(self, task: str, split: str = "validation", data_dir: str | None = None, max_rows: int | None = None):
        super().__init__()
        get_spec(task)
        data = load_dataset(task, data_dir=data_dir)  # a set without a dev split gets the package's one (data.dev_split)
        if split not in data:
            raise ValueError(f"split: {task!r} has no {split!r} split (has {list(data)})")
        self.task, self.split, self.data = task, split, data
        if max_rows is not None and len(data[split]) > max_rows:
            self.data = dict(data)
            self.data[split] = data[split].shuffle(seed=0).select(range(max_rows))
        self.name = f"{task}-{'dev' if split == 'validation' else split}"
        self.primary_metric = "main_score"

    def __call__(self, model, output_path: str | None = None, epoch: int = -1, steps: int = -1) -> dict[str, float]:
        scores = evaluate_split(model, self.task, self.data, self.split)
        metrics = {k: v for k, v in scores.items() if not k.startswith("num_")}
        metrics = self.prefix_name_to_metrics(metrics, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics
