"""Inference: zero-shot classification by label embeddings, early-exit classification.

Names load lazily so that the CLI (which only needs a few constants to build its parser) starts
without importing sentence-transformers.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "ZeroShotClassifier": "contrastive_bert.inference.zero_shot",
    "EarlyExitClassifier": "contrastive_bert.inference.early_exit",
    "ExitCriterion": "contrastive_bert.inference.exit_criteria",
    "register_criterion": "contrastive_bert.inference.exit_criteria",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
