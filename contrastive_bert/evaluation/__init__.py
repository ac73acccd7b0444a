"""Evaluation the way the field does it: STS Spearman, MTEB-style classification, answer-selection MRR/MAP."""

from contrastive_bert.evaluation.classification import classification_scores, evaluate_classification, knn_predict
from contrastive_bert.evaluation.retrieval import evaluate_answer_selection, ranking_scores
from contrastive_bert.evaluation.sts import evaluate_sts, sts_scores
from contrastive_bert.evaluation.tasks import check_tasks, evaluate_split, evaluate_task, evaluate_tasks

__all__ = [
    "check_tasks",
    "classification_scores",
    "evaluate_answer_selection",
    "evaluate_classification",
    "evaluate_split",
    "evaluate_sts",
    "evaluate_task",
    "evaluate_tasks",
    "knn_predict",
    "ranking_scores",
    "sts_scores",
]
