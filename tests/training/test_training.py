"""Short real training runs of the tiny BERT inside SentenceTransformerTrainer on real STS-B
pairs: the dev score changes, the saved model reloads identically, resume continues from the
last checkpoint, overwrite keeps the user's own files."""

from __future__ import annotations

import copy
import json
import shutil
import time

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from transformers import TrainerCallback

from contrastive_bert.training import TrainingRecipe, get_loss_entry
from contrastive_bert.training.runner import fit, train
from contrastive_bert.training.task_evaluator import TaskEvaluator
from contrastive_bert.training.train_data import build_train_dataset

TEXTS = ["A plane is taking off.", "A man is playing a large flute.", "Three dogs run on the beach."]


class StepRecorder(TrainerCallback):
    def __init__(self):
        self.steps: list[int] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append(state.global_step)


def _recipe(tmp_path, shared_data, **fields) -> TrainingRecipe:
    values = dict(
        model="tiny", datasets=["stsb"], loss="mnrl", output_dir=str(tmp_path / "run"), data_dir=str(shared_data),
        max_steps=4, batch_size=8, learning_rate=1e-3, warmup_ratio=0.0, max_train_samples=96, max_seq_length=32,
        dev_task=None, eval_tasks=[], eval_steps=2, save_steps=2, logging_steps=1, seed=0,
    )
    values.update(fields)
    return TrainingRecipe(**values)


def _params(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_train_changes_dev_score_and_saves_reloadable_model(tmp_path, shared_data, tiny_loader, _tiny_model_session):
    dev = TaskEvaluator("stsb", data_dir=shared_data)
    dev_before = dev(copy.deepcopy(_tiny_model_session))["stsb-dev_main_score"]
    recipe = _recipe(tmp_path, shared_data, dev_task="stsb", eval_tasks=["stsb"], eval_steps=4, save_steps=4)

    outcome = train(recipe)

    assert tiny_loader == ["tiny"]
    dev_logs = [entry for entry in outcome.log_history if "eval_stsb-dev_main_score" in entry]
    assert [entry["step"] for entry in dev_logs] == [4]
    dev_after = dev_logs[-1]["eval_stsb-dev_main_score"]
    assert abs(dev_after - dev_before) > 0.01, (dev_before, dev_after)
    assert [entry["step"] for entry in outcome.log_history if "loss" in entry] == [1, 2, 3, 4]
    assert all(np.isfinite(entry["loss"]) for entry in outcome.log_history if "loss" in entry)
    # test-split scores before and after, also in results.json
    assert outcome.before["stsb"]["num_pairs"] == outcome.after["stsb"]["num_pairs"] == 1379
    assert outcome.before["stsb"]["main_score"] != pytest.approx(outcome.after["stsb"]["main_score"], abs=1e-6)
    run = tmp_path / "run"
    results = json.loads((run / "results.json").read_text())
    assert results["global_step"] == 4 and results["train_rows"] == 96
    assert results["after"]["stsb"]["main_score"] == pytest.approx(outcome.after["stsb"]["main_score"])
    assert results["recipe"]["loss"] == "mnrl"
    assert json.loads((run / "recipe.json").read_text())["max_steps"] == 4
    assert (run / "checkpoints" / "checkpoint-4").is_dir()
    # the final model reloads with plain sentence-transformers and embeds identically
    final = run / "final"
    assert (final / "README.md").is_file()  # ST's model card
    reloaded = SentenceTransformer(str(final), device="cpu")
    np.testing.assert_allclose(reloaded.encode(TEXTS), outcome.model.encode(TEXTS), atol=1e-6)
    assert not np.allclose(reloaded.encode(TEXTS), _tiny_model_session.encode(TEXTS), atol=1e-4)


def test_resume_continues_from_last_checkpoint(tmp_path, shared_data, tiny_loader):
    first = train(_recipe(tmp_path, shared_data, max_steps=4, save_steps=2))
    run = tmp_path / "run"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["checkpoint-2", "checkpoint-4"]
    assert json.loads((run / "results.json").read_text())["global_step"] == 4
    at_four = SentenceTransformer(str(run / "checkpoints" / "checkpoint-4"), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(at_four, first.model.encode(TEXTS), atol=1e-6)

    # the training seconds so far go with each checkpoint; a resume starts its clock from them
    first_seconds = json.loads((run / "results.json").read_text())["train_seconds"]
    clock = run / "checkpoints" / "checkpoint-4" / "training_clock.json"
    assert 0 < json.loads(clock.read_text())["train_seconds"] <= first_seconds
    clock.write_text(json.dumps({"train_seconds": 1000.0}))  # as if the first part had trained 1,000 s
    recorder = StepRecorder()
    started = time.perf_counter()
    second = train(_recipe(tmp_path, shared_data, max_steps=6, save_steps=2, resume=True), callbacks=[recorder])
    elapsed = time.perf_counter() - started

    results = json.loads((run / "results.json").read_text())
    assert results["train_seconds_before_resume"] == 1000.0 and 1000.0 < results["train_seconds"] < 1000.0 + elapsed
    assert second.train_seconds == results["train_seconds"]
    assert 1000.0 < json.loads((run / "checkpoints" / "checkpoint-6" / "training_clock.json").read_text())["train_seconds"]
    assert recorder.steps == [5, 6]  # continued from checkpoint-4, did not restart at step 1
    assert json.loads((run / "results.json").read_text())["global_step"] == 6
    state = json.loads((run / "checkpoints" / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["global_step"] == 6
    losses = [entry["step"] for entry in second.log_history if "loss" in entry]
    assert losses == [1, 2, 3, 4, 5, 6]  # history restored from the checkpoint, then extended
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["checkpoint-4", "checkpoint-6"]  # save_total_limit 2


def test_a_run_stopped_after_its_last_checkpoint_resumes_without_training_a_step_more(tmp_path, shared_data, tiny_loader):
    """Stopped while scoring or saving after its last step (final/ and results.json never written), a run
    resumes from the checkpoint at its last step and trains nothing (transformers, resuming mid-epoch,
    would train step max_steps + 1): the final model is that checkpoint's, the step count max_steps."""
    train(_recipe(tmp_path, shared_data, max_steps=4, save_steps=2))
    run = tmp_path / "run"
    shutil.rmtree(run / "final")
    (run / "results.json").unlink()
    at_four = SentenceTransformer(str(run / "checkpoints" / "checkpoint-4"), device="cpu").encode(TEXTS)

    recorder = StepRecorder()
    resumed = train(_recipe(tmp_path, shared_data, max_steps=4, save_steps=2, resume=True), callbacks=[recorder])

    assert recorder.steps == []
    assert json.loads((run / "results.json").read_text())["global_step"] == 4
    np.testing.assert_allclose(resumed.model.encode(TEXTS), at_four, atol=1e-6)
    np.testing.assert_allclose(SentenceTransformer(str(run / "final"), device="cpu").encode(TEXTS), at_four, atol=1e-6)
    assert [entry["step"] for entry in resumed.log_history if "loss" in entry] == [1, 2, 3, 4]


def test_overwrite_replaces_run_but_keeps_user_files(tmp_path, shared_data, tiny_loader):
    run = tmp_path / "run"
    (run / "checkpoints" / "checkpoint-99").mkdir(parents=True)
    (run / "final").mkdir()
    (run / "final" / "stale.txt").write_text("old")
    (run / "results.json").write_text('{"global_step": 99}')
    (run / "notes.md").write_text("my notes")
    (run / "data").mkdir()
    (run / "data" / "extra.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="already exists and is not empty; pass --overwrite"):
        train(_recipe(tmp_path, shared_data, max_steps=2))
    assert tiny_loader == []  # refused before any model was loaded

    train(_recipe(tmp_path, shared_data, max_steps=2, overwrite=True))

    assert (run / "notes.md").read_text() == "my notes"
    assert (run / "data" / "extra.csv").is_file()
    assert not (run / "final" / "stale.txt").exists()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["checkpoint-2"]
    assert json.loads((run / "results.json").read_text())["global_step"] == 2


@pytest.mark.parametrize("loss_name", ["cosent", "cached_mnrl"])
def test_fit_baseline_losses_update_weights(tmp_path, shared_data, tiny_model, loss_name):
    entry = get_loss_entry(loss_name)
    recipe = _recipe(tmp_path, shared_data, loss=loss_name, max_steps=2, loss_options={"mini_batch_size": 4} if loss_name == "cached_mnrl" else {})
    data = build_train_dataset(["stsb"], entry.data_format, data_dir=shared_data, max_samples=32)
    before = _params(tiny_model)
    trainer = fit(tiny_model, data, entry.build(tiny_model, data, recipe), recipe, str(tmp_path / "ckpt"),
                  batch_sampler=entry.batch_sampler)
    assert trainer.state.global_step == 2
    after = _params(tiny_model)
    assert any(not torch.equal(before[name], after[name]) for name in before)


def test_fit_respects_freeze_layers(tmp_path, shared_data, tiny_model):
    recipe = _recipe(tmp_path, shared_data, max_steps=2, freeze_layers=1)
    data = build_train_dataset(["stsb"], "pairs", data_dir=shared_data, max_samples=32)
    before = _params(tiny_model)
    fit(tiny_model, data, get_loss_entry("mnrl").build(tiny_model, data, recipe), recipe, str(tmp_path / "ckpt"),
        batch_sampler="no_duplicates")
    after = _params(tiny_model)
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed and all("encoder.layer.1." in name or "pooler" in name for name in changed), sorted(changed)
    assert tiny_model.max_seq_length == 32
