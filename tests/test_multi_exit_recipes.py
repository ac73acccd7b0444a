"""A multi-exit recipe's stage 1 is its data set's classifier recipe, field for field: the backbone the
exits are added to is the model a user would ship as the classifier (issue 28)."""

from __future__ import annotations

from pathlib import Path

import pytest

from contrastive_bert.training.recipe import TrainingRecipe
from contrastive_bert.training.stages import stage_recipes

RECIPES = Path(__file__).resolve().parents[1] / "scripts" / "recipes"
# multi-exit recipe -> the dev-chosen classifier recipe its stage 1 must equal
PAIRS = [("banking77_multi_exit.yaml", "banking77_acl.yaml"), ("emotion_multi_exit.yaml", "emotion_acl.yaml")]
# Fields that only say where and how often to write or log: they never change the trained model.
# Everything else (model, data, loss and options, epochs/steps, learning rates, batch size, length,
# seed, the evaluation run before training, which draws from the random state) must be equal.
IO_FIELDS = {"output_dir", "data_dir", "save_steps", "save_total_limit", "logging_steps", "eval_steps", "overwrite",
             "resume", "stages"}


def stage1_differences(multi_exit: TrainingRecipe, classifier: TrainingRecipe) -> dict[str, tuple]:
    """``{field: (stage 1's value, the classifier recipe's)}`` for every model-affecting field that differs."""
    stage1 = stage_recipes(multi_exit)[0]
    return {name: (getattr(stage1, name), getattr(classifier, name)) for name in TrainingRecipe.field_names()
            if name not in IO_FIELDS and getattr(stage1, name) != getattr(classifier, name)}


@pytest.mark.parametrize(("multi_exit", "classifier"), PAIRS)
def test_stage1_is_the_classifier_recipe(multi_exit, classifier):
    multi = TrainingRecipe.from_file(RECIPES / multi_exit)
    assert stage1_differences(multi, TrainingRecipe.from_file(RECIPES / classifier)) == {}
    assert [stage["loss"] for stage in multi.stages] == ["acl", "cross_layer"]


@pytest.mark.parametrize(("multi_exit", "classifier"), PAIRS)
def test_stage2_keeps_the_classifier_length(multi_exit, classifier):
    """Stage 2 (and so the final model early exit serves) reads texts at the classifier's length, so
    the final exit answers exactly as the stage-1 classifier does."""
    stage2 = stage_recipes(TrainingRecipe.from_file(RECIPES / multi_exit))[1]
    assert stage2.max_seq_length == TrainingRecipe.from_file(RECIPES / classifier).max_seq_length
    assert stage2.loss == "cross_layer" and stage2.loss_options["exit_layers"] == [2, 3, 4, 5]


@pytest.mark.parametrize("field, value", [("learning_rate", 3e-4), ("epochs", 1.0), ("max_steps", 300), ("seed", 1),
                                           ("max_seq_length", 64), ("batch_size", 16), ("head_learning_rate", 1e-3),
                                           ("loss_options", {"mode": "acl"}), ("datasets", ["emotion"])])
def test_a_differing_stage1_field_is_caught(field, value):
    multi = TrainingRecipe.from_file(RECIPES / "banking77_multi_exit.yaml")
    multi.stages[0] = {**multi.stages[0], field: value}
    differences = stage1_differences(multi, TrainingRecipe.from_file(RECIPES / "banking77_acl.yaml"))
    assert list(differences) == [field]
