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
    assert accumulation_hint(loss, 8, {"dual_bank": True, "bank_scope": "step"}) is None


@pytest.mark.parametrize("loss", ["queue_infonce", "cached_queue_infonce"])
def test_a_per_step_dual_bank_without_accumulation_is_said_to_be_mnrl(loss):
    hint = accumulation_hint(loss, 1, {"dual_bank": True, "bank_scope": "step"})
    assert hint is not None and "the bank stays empty and the loss is MNRL's" in hint and "--gradient-accumulation-steps" in hint
    assert accumulation_hint(loss, 1, {"dual_bank": True, "bank_scope": "fifo"}) is None  # keeps rows across steps
    assert accumulation_hint(loss, 1, {"dual_bank": True}) is None  # fifo by default
    assert accumulation_hint(loss, 1, {"bank_scope": "step"}) is None  # no dual bank


def test_the_cli_says_it_once_per_run_on_stderr(capsys):
    recipe = TrainingRecipe(datasets=["stsb"], loss="mnrl", gradient_accumulation_steps=4,
                            stages=[{"epochs": 1}, {"epochs": 2}])
    _print_accumulation_hint(recipe)
    err = capsys.readouterr().err
    assert err.count("note: gradient accumulation") == 1 and err.count("\n") == 1
    _print_accumulation_hint(TrainingRecipe(datasets=["stsb"], loss="mnrl"))
    assert capsys.readouterr().err == ""


def test_the_cli_reads_each_stages_loss_options(capsys):
    recipe = TrainingRecipe(datasets=["stsb"], loss="queue_infonce", loss_options={"dual_bank": True, "bank_scope": "step"})
    _print_accumulation_hint(recipe)
    assert capsys.readouterr().err.count("the bank stays empty") == 1
