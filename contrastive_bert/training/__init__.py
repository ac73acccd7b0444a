"""Training inside the sentence-transformers loop: recipes, the loss registry, callbacks."""

from contrastive_bert.training.losses_registry import LOSSES, LossEntry, get_loss_entry, register_loss
from contrastive_bert.training.recipe import TrainingRecipe
from contrastive_bert.training.runner import TrainingOutcome, check_recipe, fit, train

__all__ = ["LOSSES", "LossEntry", "TrainingOutcome", "TrainingRecipe", "check_recipe", "fit", "get_loss_entry", "register_loss", "train"]
