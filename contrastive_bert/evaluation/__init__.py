"""Evaluation the way the field does it: STS Spearman, MTEB-style classification, answer-selection MRR/MAP.

Names load on first use, so that checking task names (``check_tasks``) before a run does not
import scikit-learn.
"""

from __future__ import annotations

from contrastive_bert.lazy import lazy_exports

_EXPORTS = {
    "classification_scores": "classification",
    "evaluate_classification": "classification",
    "knn_predict": "classification",
    "evaluate_answer_selection": "retrieval",
    "ranking_scores": "retrieval",
    "evaluate_sts": "sts",
    "sts_scores": "sts",
    "check_tasks": "tasks",
    "evaluate_split": "tasks",
    "evaluate_task": "tasks",
    "evaluate_tasks": "tasks",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
