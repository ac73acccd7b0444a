"""CorpusNegativeRefresh (ANCE in the trainer): the negatives are mined again by the model being
trained at each later epoch, the trainer's batches carry the new ones, and the rows stay the same
(anchor, positive) pairs."""

from __future__ import annotations

import pytest
import torch

from contrastive_bert.corpus_mining import mine_corpus_negatives
from contrastive_bert.data.beir import RetrievalData
from contrastive_bert.training import TrainingRecipe, fit, get_loss_entry
from contrastive_bert.training.corpus_refresh import CorpusNegativeRefresh

WORDS = ["protein", "cell", "gene", "virus", "dose", "trial", "mouse", "cancer", "brain", "heart", "diet", "sleep"]


@pytest.fixture()
def data() -> RetrievalData:
    corpus = {f"d{i}": " ".join(WORDS[(i * j) % len(WORDS)] for j in range(1, 6)) + f" study {i}" for i in range(40)}
    queries = {f"q{i}": " ".join(WORDS[(i + j) % len(WORDS)] for j in range(3)) for i in range(12)}
    train = {f"q{i}": {f"d{i}": 1} for i in range(8)}
    return RetrievalData(corpus=corpus, queries=queries, qrels={"train": train, "test": {"q9": {"d9": 1}}})


def _recipe(tmp_path, epochs: int) -> TrainingRecipe:
    return TrainingRecipe(model="tiny", datasets=["scifact"], loss="mnrl", output_dir=str(tmp_path / "run"), epochs=epochs,
                          batch_size=4, learning_rate=1e-3, warmup_ratio=0.0, max_seq_length=32, dev_task=None, eval_tasks=[],
                          eval_steps=10**6, save_steps=10**6, logging_steps=1, seed=0)


class _Sentinel(CorpusNegativeRefresh):
    """A refresh that writes a text no document has, so the batches show which negatives they got."""

    def refresh(self):
        for key in self.negatives:
            self.negatives[key] = ["zzz refreshed negative"]
        return {"changed": len(self.negatives)}


def test_refreshed_negatives_reach_the_trainers_batches(tmp_path, tiny_model, data):
    rows = mine_corpus_negatives(tiny_model, data, "train", num_negatives=1, perc_pos=None)
    refresh = _Sentinel(tiny_model, data, rows, perc_pos=None)
    sentinel = tiny_model.tokenize(["zzz refreshed negative"])["input_ids"][0]
    seen = []  # per loss call: did the negative column hold the sentinel?
    loss = get_loss_entry("mnrl").build(tiny_model, refresh.rows, _recipe(tmp_path, 2))
    forward = loss.forward

    def recording_forward(sentence_features, labels=None):
        features = list(sentence_features)
        ids = features[2]["input_ids"]
        seen.append(bool((ids[:, : sentinel.shape[0]] == sentinel).all(dim=1).any()))
        return forward(features, labels)

    loss.forward = recording_forward
    trainer = fit(tiny_model, refresh.rows, loss, _recipe(tmp_path, 2), str(tmp_path / "ckpt"), callbacks=[refresh])
    steps_per_epoch = trainer.state.global_step // 2
    assert [h["epoch"] for h in refresh.history] == [2]  # refreshed once, before the second epoch
    assert seen[:steps_per_epoch] == [False] * steps_per_epoch  # the first epoch: the untrained model's negatives
    assert seen[steps_per_epoch:] == [True] * steps_per_epoch  # the second: the refreshed ones, in every batch


def test_refresh_remines_with_the_current_model(tiny_model, data):
    rows = mine_corpus_negatives(tiny_model, data, "train", num_negatives=1, perc_pos=None)
    refresh = CorpusNegativeRefresh(tiny_model, data, rows, perc_pos=None)
    assert refresh.refresh()["changed"] == 0  # the same model mines the same negatives
    with torch.no_grad():
        for parameter in tiny_model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
    record = refresh.refresh()
    assert record["remined"] == len(rows) and record["changed"] > 0
    expected = mine_corpus_negatives(tiny_model, data, "train", num_negatives=1, perc_pos=None)
    for row in expected:
        assert refresh.negatives[(row["anchor"], row["positive"])] == [row["negative_1"]]
    assert [r["negative_1"] for r in refresh.rows] == [r["negative_1"] for r in expected]  # the rows the trainer reads
    tiny_model.train()
    refresh.refresh()
    assert tiny_model.training  # a refresh mid-training leaves the model in training mode


def test_bad_rows_and_schedule_are_refused(tiny_model, data):
    rows = mine_corpus_negatives(tiny_model, data, "train", num_negatives=1, perc_pos=None)
    with pytest.raises(ValueError, match="every_epochs"):
        CorpusNegativeRefresh(tiny_model, data, rows, every_epochs=0)
    with pytest.raises(ValueError, match="mining_options: .*perc_positive"):
        CorpusNegativeRefresh(tiny_model, data, rows, perc_positive=0.9)  # misnamed: refused now, not an epoch later
    with pytest.raises(ValueError, match="rows: expected columns"):
        CorpusNegativeRefresh(tiny_model, data, rows.remove_columns("negative_1"))
