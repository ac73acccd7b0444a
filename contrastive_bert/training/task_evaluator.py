"""A sentence-transformers evaluator that scores a registry task, so that dev evaluation during
training and the final evaluation compute the same numbers."""

from __future__ import annotations

from sentence_transformers.base.evaluation.evaluator import BaseEvaluator

from contrastive_bert.data import get_spec, load_dataset
from contrastive_bert.data.beir import RetrievalData
from contrastive_bert.evaluation.tasks import evaluate_split
from contrastive_bert.training.data_defaults import data_label


class TaskEvaluator(BaseEvaluator):
    """Evaluate on ``split`` of the registry data set ``task`` (STS Spearman, accuracy, MRR or nDCG@10).

    ``data``: the data set already loaded (a ``DatasetDict``, or a retrieval set's
    :class:`RetrievalData`); default: loaded here. A retrieval set's corpus structure is built
    once, here, not at every evaluation. ``max_rows``: a seeded sample of ``split``'s rows (a
    retrieval set: of its queries, searched over the whole corpus)."""

    def __init__(self, task: str, split: str = "validation", data_dir: str | None = None, max_rows: int | None = None,
                 data=None):
        super().__init__()
        spec = get_spec(task)
        if data is None:
            data = load_dataset(task, data_dir=data_dir)  # a set without a dev split gets the package's one (data.dev_split)
        if spec.task_type == "retrieval" and not isinstance(data, RetrievalData):
            data = RetrievalData.from_splits(data)
        splits = list(data.qrels) if isinstance(data, RetrievalData) else list(data)
        if split not in splits:
            raise ValueError(f"split: {task!r} has no {split!r} split (has {splits})")
        self.task, self.split, self.data = task, split, data
        if max_rows is not None and isinstance(data, RetrievalData):
            self.data = data.with_queries_capped(max_rows)
        elif max_rows is not None and len(data[split]) > max_rows:
            self.data = dict(data)
            self.data[split] = data[split].shuffle(seed=0).select(range(max_rows))
        self.name = f"{data_label(task)}-{'dev' if split == 'validation' else split}"  # a folder by its name
        self.primary_metric = "main_score"

    def __call__(self, model, output_path: str | None = None, epoch: int = -1, steps: int = -1) -> dict[str, float]:
        scores = evaluate_split(model, self.task, self.data, self.split)
        metrics = {k: v for k, v in scores.items() if not k.startswith("num_")}
        metrics = self.prefix_name_to_metrics(metrics, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics
