"""QueueCoSENTLoss and the CoSENT/AnglE ranking term: hand-computed values, equality with
sentence-transformers' CoSENTLoss / AnglELoss, the InfoNCE part against a brute-force reference,
the queue holding only high-score positives, and training from a recipe and a plain ST script."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from sentence_transformers.sentence_transformer.losses import AnglELoss, CoSENTLoss

from contrastive_bert.losses.queue_cosent import QueueCoSENTLoss, build_queue_cosent_loss
from contrastive_bert.losses.score_terms import ranking_loss

S1 = ["a man plays a guitar", "a woman slices an onion", "two dogs run in a field", "the stock market fell", "a child reads a book"]
S2 = ["a man is playing the guitar", "someone is cutting an onion", "a cat sleeps on a sofa", "shares dropped today", "a boy is swimming"]
SCORES = torch.tensor([0.95, 0.85, 0.1, 0.6, 0.3])


def _features(model):
    return [model.preprocess(S1), model.preprocess(S2)]


def test_ranking_loss_hand_computed():
    # ordered pairs (label_i > label_j): (0, 1): s1 - s0 = -0.4, (0, 2): -0.8, (1, 2): -0.4
    got = ranking_loss(torch.tensor([0.9, 0.5, 0.1]), torch.tensor([1.0, 0.5, 0.0]), scale=1.0)
    assert math.isclose(float(got), math.log(1 + 2 * math.exp(-0.4) + math.exp(-0.8)), rel_tol=1e-6)
    # ties give no pair: log(1 + 0) = 0
    assert float(ranking_loss(torch.tensor([0.2, 0.7]), torch.tensor([0.5, 0.5]))) == 0.0


@pytest.mark.parametrize(("term", "reference"), [("cosent", CoSENTLoss), ("angle", AnglELoss)])
@pytest.mark.parametrize("scale", [20.0, 7.0])
def test_without_infonce_equals_sentence_transformers(tiny_model, term, reference, scale):
    tiny_model.eval()
    features = _features(tiny_model)
    expected = reference(tiny_model, scale=scale)(features, SCORES)
    loss = QueueCoSENTLoss(tiny_model, infonce_weight=0.0, score_term=term, score_scale=scale, queue_size=8)
    parts = loss(features, SCORES)
    assert abs(float(sum(parts.values()).detach()) - float(expected.detach())) <= 1e-6
    assert float(parts["in_batch"]) == float(parts["queue"]) == float(parts["hard"]) == 0.0


def test_infonce_part_over_high_rows_with_low_partners_as_negatives(tiny_model):
    """Rows 0, 1 (>= 0.8) are the InfoNCE pairs; rows 2 (0.1) and 4 (0.3, <= 0.4) give their
    sentence2 as negatives; row 3 (0.6) only enters the score term."""
    tiny_model.eval()
    features = _features(tiny_model)
    loss = QueueCoSENTLoss(tiny_model, infonce_weight=0.5, score_weight=2.0, queue_size=8, temperature=0.1)
    parts = loss(features, SCORES)
    with torch.no_grad():
        e1, e2 = (F.normalize(tiny_model(f)["sentence_embedding"], dim=1) for f in features)
    docs = torch.cat([e2[[0, 1]], e2[[2, 4]]])
    expected_infonce = sum(
        -float(e1[i] @ docs[i]) / 0.1 + math.log(sum(math.exp(float(e1[i] @ d) / 0.1) for d in docs)) for i in (0, 1)
    ) / 2
    assert math.isclose(float(parts["in_batch"]), 0.5 * expected_infonce, rel_tol=1e-5)
    assert float(parts["queue"]) == 0.0  # the queue is empty in eval mode
    expected_score = 2.0 * float(CoSENTLoss(tiny_model)(features, SCORES))
    assert math.isclose(float(parts["score"]), expected_score, rel_tol=1e-6)
    without_negatives = QueueCoSENTLoss(tiny_model, infonce_weight=0.5, queue_size=8, temperature=0.1, negative_threshold=None)
    assert float(without_negatives(features, SCORES)["in_batch"]) < float(parts["in_batch"])


def test_training_enqueues_only_the_high_score_positives(tiny_model):
    tiny_model.train()
    loss = QueueCoSENTLoss(tiny_model, queue_size=8, num_hard_negatives=1)
    parts = loss(_features(tiny_model), SCORES)
    sum(parts.values()).backward()
    assert len(loss.queue) == 2 and int(loss.queue_loss.num_steps) == 1
    # a batch without any high-score row: the score term alone, nothing enqueued
    parts = loss(_features(tiny_model), torch.tensor([0.5, 0.1, 0.2, 0.6, 0.3]))
    assert float(parts["in_batch"]) == 0.0 and float(parts["score"]) > 0 and len(loss.queue) == 2
    assert int(loss.queue_loss.num_steps) == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"infonce_weight": -1}, "loss_options.infonce_weight: expected a number >= 0"),
        ({"infonce_weight": 0, "score_weight": 0}, "loss_options.score_weight: expected a positive number"),
        ({"score_term": "cosine"}, "loss_options.score_term: expected one of 'cosent', 'angle'"),
        ({"score_scale": 0}, "loss_options.score_scale: expected a positive number"),
        ({"positive_threshold": 1.5}, r"loss_options.positive_threshold: expected a score in \[0, 1\]"),
        ({"negative_threshold": 0.9}, "loss_options.negative_threshold: expected a score below positive_threshold"),
        ({"temperature": 0}, "loss_options.temperature: expected a positive number, got 0"),
        ({"temprature": 0.1}, "loss_options.temprature: unknown option of QueueInfoNCELoss .*'temperature'"),
    ],
)
def test_bad_options_need_no_model(options, message):
    with pytest.raises(ValueError, match=message):
        QueueCoSENTLoss.check_options(options)


def _scored_pairs(n: int = 16):
    from datasets import Dataset

    return Dataset.from_dict({
        "sentence1": [f"sentence number {i} about topic {i % 4}" for i in range(n)],
        "sentence2": [f"a rewording of sentence {i} on topic {i % 4}" for i in range(n)],
        "score": [(1.0, 0.9, 0.2, 0.5)[i % 4] for i in range(n)],
    })


def test_trains_in_a_plain_sentence_transformers_script(tiny_model, tmp_path):
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    loss = build_queue_cosent_loss(tiny_model, 16, 4, num_hard_negatives=1, hard_negative_share=0.2)
    assert loss.queue.size == 16  # the seed rule 4 * 16 / 4
    args = SentenceTransformerTrainingArguments(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=4,
                                                report_to=[], use_cpu=True, disable_tqdm=True, save_strategy="no")
    SentenceTransformerTrainer(model=tiny_model, args=args, train_dataset=_scored_pairs(), loss=loss).train()
    assert int(loss.queue_loss.num_steps) == 3 and len(loss.queue) > 0


def test_trains_from_a_recipe(tiny_model, tmp_path):
    from contrastive_bert.training import TrainingRecipe, get_loss_entry
    from contrastive_bert.training.runner import fit

    recipe = TrainingRecipe(loss="queue_cosent", loss_options={"score_weight": 0.5, "temperature": 0.1}, max_steps=2,
                            batch_size=4, dev_task=None, eval_tasks=[], output_dir=str(tmp_path / "run"))
    entry = get_loss_entry("queue_cosent")
    assert entry.data_format == "scored_pairs"
    entry.check_options(recipe.loss_options)
    with pytest.raises(ValueError, match="loss_options.score_wieght: unknown option"):
        entry.check_options({"score_wieght": 1.0})
    data = _scored_pairs()
    loss = entry.build(tiny_model, data, recipe)
    assert isinstance(loss, QueueCoSENTLoss) and loss.score_weight == 0.5 and loss.queue.size == 16
    fit(tiny_model, data, loss, recipe, str(tmp_path / "run"), batch_sampler=entry.batch_sampler)
    assert int(loss.queue_loss.num_steps) == 2


def test_checkpoint_round_trip_through_the_callback(tiny_model, tmp_path):
    from contrastive_bert.training.queue_checkpoint import load_queue_state, save_queue_state

    tiny_model.train()
    loss = QueueCoSENTLoss(tiny_model, queue_size=8)
    loss(_features(tiny_model), SCORES)
    save_queue_state(loss, tmp_path)
    fresh = QueueCoSENTLoss(tiny_model)
    assert load_queue_state(fresh, tmp_path)
    torch.testing.assert_close(fresh.queue.embeddings, loss.queue.embeddings)
    # the same queue state also restores into the plain queue loss (one queue on each side)
    from contrastive_bert.losses.queue_infonce import QueueInfoNCELoss

    plain = QueueInfoNCELoss(tiny_model)
    assert load_queue_state(plain, tmp_path) and len(plain.queue) == 2
