"""Inference: zero-shot classification by label embeddings, early-exit classification, corpus search.

Names load lazily so that the CLI (which only needs a few constants to build its parser) starts
without importing sentence-transformers.
"""

from __future__ import annotations

from contrastive_bert.lazy import lazy_exports

_LAZY = {
    "ZeroShotClassifier": "zero_shot",
    "CorpusIndex": "corpus_index",
    "SearchHit": "corpus_index",
    "EarlyExitClassifier": "early_exit",
    "ExitCriterion": "exit_criteria",
    "register_criterion": "exit_criteria",
}

__all__ = list(_LAZY)

__getattr__ = lazy_exports(__name__, _LAZY)
