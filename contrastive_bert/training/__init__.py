"""Training inside the sentence-transformers loop: recipes, the loss registry, callbacks.

Names are imported on first use, so that ``contrastive_bert.training.recipe`` (read by the CLI
to build its flags) does not import torch.
"""

from __future__ import annotations

from contrastive_bert.lazy import lazy_exports

_EXPORTS = {
    "LOSSES": "losses_registry",
    "LossEntry": "losses_registry",
    "get_loss_entry": "losses_registry",
    "register_loss": "losses_registry",
    "TrainingRecipe": "recipe",
    "NothingTrained": "runner",
    "TrainingOutcome": "runner",
    "check_recipe": "runner",
    "fit": "runner",
    "train": "runner",
    "TrainingDiverged": "divergence",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
