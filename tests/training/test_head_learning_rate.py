"""A freshly initialised head trains at its own learning rate (ST's learning_rate_mapping)."""

import re

import pytest

from contrastive_bert.heads.label_embedding import attach_label_head
from contrastive_bert.training import TrainingRecipe
from contrastive_bert.training.runner import head_parameter_pattern, training_arguments


def test_head_pattern_matches_only_the_head(tiny_model):
    assert head_parameter_pattern(tiny_model) is None  # Transformer + Pooling: nothing on top to train
    attach_label_head(tiny_model, ["a", "b", "c"])
    pattern = head_parameter_pattern(tiny_model)
    names = [f"model.{n}" for n, _ in tiny_model.named_parameters()]
    matched = [n for n in names if re.search(pattern, n)]
    assert matched and all(not n.startswith("model.0.") for n in matched)
    assert len(matched) == sum(1 for n in names if not n.startswith("model.0."))


def test_head_learning_rate_reaches_the_optimizer(tiny_model, tmp_path):
    attach_label_head(tiny_model, ["a", "b", "c"])
    recipe = TrainingRecipe(head_learning_rate=5e-3)
    args = training_arguments(recipe, str(tmp_path), head_pattern=head_parameter_pattern(tiny_model))
    assert list(args.learning_rate_mapping.values()) == [5e-3]
    assert not training_arguments(TrainingRecipe(), str(tmp_path)).learning_rate_mapping


def test_head_learning_rate_must_be_positive():
    with pytest.raises(ValueError, match="head_learning_rate: expected a positive number"):
        TrainingRecipe(head_learning_rate=0.0)
