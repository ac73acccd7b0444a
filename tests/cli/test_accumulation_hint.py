"""An in-batch loss trained with gradient accumulation: one line says the micro-batches never see
each other's documents, and what does enlarge the negatives."""

from __future__ import annotations

import pytest

from contrastive_bert.cli.train import _print_accumulation_hint
from contrastive_bert.training import TrainingRecipe
from contrastive_bert.training.losses_registry import accumulation_hint


@pytest.mark.parametrize("loss", ["mnrl", "cached_mnrl", "gist", "cached_gist"])
def test_in_batch_losses_with_accumulation_get_the_hint(loss):
    hint = accumulation_hint(loss, 8)
    assert hint is not None and "8 micro-batches" in hint and f"{loss}'s" in hint
    cached = loss if loss.startswith("cached_") else f"cached_{loss}"
    assert f"train {cached} at the full batch (8 x the batch size" in hint and "dual_bank" not in hint
    assert accumulation_hint(loss, 1) is None


@pytest.mark.parametrize("loss", ["queue_infonce", "cosent", "acl"])
def test_losses_whose_negatives_span_micro_batches_or_that_have_none_get_no_hint(loss):
    assert accumulation_hint(loss, 8) is None


def test_the_cli_says_it_once_per_run_on_stderr(capsys):
    recipe = TrainingRecipe(datasets=["stsb"], loss="mnrl", gradient_accumulation_steps=4,
                            stages=[{"epochs": 1}, {"epochs": 2}])
    _print_accumulation_hint(recipe)
    err = capsys.readouterr().err
    assert err.count("note: gradient accumulation") == 1 and err.count("\n") == 1
    _print_accumulation_hint(TrainingRecipe(datasets=["stsb"], loss="mnrl"))
    assert capsys.readouterr().err == ""
