"""QueueInfoNCELoss / CachedQueueInfoNCELoss: MNRL equivalence, a brute-force reference,
cached == uncached, false-negative control, momentum encoder, checkpoint/resume, frozen layers, CLI."""

from __future__ import annotations

import argparse
import math
import textwrap

import pytest
import torch
import torch.nn.functional as F
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

from contrastive_bert.losses import CachedQueueInfoNCELoss, QueueInfoNCELoss, build_queue_infonce_loss
from contrastive_bert.losses.cached_queue_infonce import build_cached_queue_infonce_loss
from contrastive_bert.queue import hash_token_ids

ANCHORS = ["a cat sits on the mat", "the dog runs fast", "the sky is blue today", "I like green tea", "trains are late"]
POSITIVES = ["a kitten rests on a rug", "a dog is running", "blue sky", "tea is what I love", "the train is delayed"]
NEGATIVES = ["a car drives by", "stocks fell", "it rains", "coffee is bitter", "planes are fast"]


def _features(model, *columns):
    return [model.preprocess(list(column)) for column in columns]


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _fill_queue(loss, n: int = 40, seed: int = 0, near=None) -> None:
    """Fill with random unit rows, some close to ``near`` (hard) rows so mining has work to do."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(n, loss.dim, generator=g)
    if near is not None:
        rows[: len(near)] = near.detach() + 0.3 * torch.randn(len(near), loss.dim, generator=g)
    loss.queue.enqueue(rows, ids=torch.arange(n))


@pytest.mark.parametrize(
    ("columns", "symmetric"),
    [((ANCHORS, POSITIVES), False), ((ANCHORS, POSITIVES, NEGATIVES), False), ((ANCHORS, POSITIVES), True)],
    ids=["pairs", "triplets", "pairs-symmetric"],
)
def test_empty_queue_equals_mnrl(tiny_model, columns, symmetric):
    tiny_model.eval()  # no dropout, so both losses see the same embeddings
    features = _features(tiny_model, *columns)
    mnrl_kwargs = {"directions": ("query_to_doc", "doc_to_query"), "partition_mode": "per_direction"} if symmetric else {}
    mnrl = MultipleNegativesRankingLoss(tiny_model, scale=1 / 0.05, **mnrl_kwargs)
    expected = mnrl(features, None)
    expected.backward()
    expected_grads = _grads(tiny_model)
    tiny_model.zero_grad()

    loss = QueueInfoNCELoss(tiny_model, queue_size=16, temperature=0.05, num_hard_negatives=3, symmetric=symmetric)
    parts = loss(features, None)
    assert set(parts) == {"in_batch", "queue", "hard"}
    total = sum(parts.values())
    torch.testing.assert_close(total, expected)
    assert parts["queue"].item() == 0 and parts["hard"].item() == 0
    total.backward()
    got = _grads(tiny_model)
    assert got.keys() == expected_grads.keys()
    for name in got:
        torch.testing.assert_close(got[name], expected_grads[name], atol=1e-6, rtol=1e-4)


def _reference_loss(anchors, docs, queue, hard_idx, keep_queue, temperature, share):
    """Brute force, one anchor at a time, straight from the formula in the module docstring."""
    a = F.normalize(anchors, dim=1)
    d = F.normalize(docs, dim=1)
    total = 0.0
    for i in range(a.shape[0]):
        terms = [math.exp(float(a[i] @ d[j]) / temperature) for j in range(d.shape[0])]
        hard = [int(j) for j in hard_idx[i] if j >= 0]
        others = [j for j in range(queue.shape[0]) if keep_queue[i, j] and j not in hard]
        terms += [math.exp(float(a[i] @ queue[j]) / temperature) for j in others]
        n_other = d.shape[0] - 1 + len(others)
        w = share / (1 - share) * n_other / len(hard) if (share is not None and hard) else 1.0
        terms += [w * math.exp(float(a[i] @ queue[j]) / temperature) for j in hard]
        total += -float(a[i] @ d[i]) / temperature + math.log(sum(terms))
    return total / a.shape[0]


@pytest.mark.parametrize("share", [None, 0.2])
def test_matches_brute_force_reference(tiny_model, share):
    torch.manual_seed(0)
    loss = QueueInfoNCELoss(
        tiny_model, queue_size=30, temperature=0.1, num_hard_negatives=4, hard_negative_share=share, relative_margin=None
    )
    anchors, positives = torch.randn(6, loss.dim), torch.randn(6, loss.dim)
    _fill_queue(loss, 30, near=anchors)
    parts = loss.compute_loss_from_embeddings([anchors, positives])
    queue = loss.queue.queue_embeddings[: len(loss.queue)]
    scores = F.normalize(anchors, dim=1) @ queue.T
    hard_idx = torch.topk(scores, 4, dim=1).indices
    keep = torch.ones_like(scores, dtype=torch.bool)
    expected = _reference_loss(anchors, positives, queue, hard_idx, keep, 0.1, share)
    assert math.isclose(float(sum(parts.values())), expected, rel_tol=1e-5)
    assert parts["queue"] > 0 and parts["hard"] > 0
    if share is None:  # unweighted hard negatives: the same total as the queue alone
        plain = QueueInfoNCELoss(tiny_model, queue_size=30, temperature=0.1, relative_margin=None)
        plain.queue.load_state_dict(loss.queue.state_dict())
        torch.testing.assert_close(sum(plain.compute_loss_from_embeddings([anchors, positives]).values()), sum(parts.values()))


def test_queue_negatives_without_own_positive(tiny_model):
    """The queue holds this batch's positives (same ids): they must not act as negatives."""
    tiny_model.eval()
    features = _features(tiny_model, ANCHORS, POSITIVES)
    loss = QueueInfoNCELoss(tiny_model, queue_size=16, num_hard_negatives=2, relative_margin=None)
    with torch.no_grad():
        pos = tiny_model(features[1])["sentence_embedding"]
    loss.queue.enqueue(pos, ids=hash_token_ids(features[1]["input_ids"], features[1]["attention_mask"]))
    parts = loss(features, None)
    # each queue row is some anchor's own positive -> filtered for that anchor, a negative for the others
    # (which already see it in the batch): the loss equals MNRL plus the duplicate in-batch rows
    filtered_none = QueueInfoNCELoss(tiny_model, queue_size=16, num_hard_negatives=2, relative_margin=None)
    filtered_none.queue.enqueue(pos)  # no ids: the positive itself counts as a (false) negative
    unfiltered = filtered_none(features, None)
    assert sum(parts.values()) < sum(unfiltered.values())
    # with the id filter no anchor may be handed its own positive as a hard negative
    anchors = F.normalize(tiny_model(features[0])["sentence_embedding"], dim=1)
    batch = loss.prepare_batch([anchors, pos], None, None, loss.queue.queue_ids[:5].clone())
    from contrastive_bert.topk_search import search_hard_negatives

    idx = search_hard_negatives(anchors, (anchors * F.normalize(pos, dim=1)).sum(1), batch.queue, 2,
                              key_ids=batch.queue_ids, positive_ids=batch.positive_ids)
    for row in range(5):
        assert row not in idx[row].tolist()


def test_training_mode_enqueues_positives_and_counts_steps(tiny_model):
    tiny_model.train()
    features = _features(tiny_model, ANCHORS, POSITIVES)
    loss = QueueInfoNCELoss(tiny_model, queue_size=8)
    loss(features, None)
    assert len(loss.queue) == 5 and int(loss.num_steps) == 1
    loss(features, None)
    assert len(loss.queue) == 8 and int(loss.num_steps) == 2  # wrapped around
    expected_ids = hash_token_ids(features[1]["input_ids"], features[1]["attention_mask"])
    assert set(loss.queue.ids.tolist()) == set(expected_ids.tolist())
    tiny_model.eval()
    loss(features, None)
    assert int(loss.num_steps) == 2  # evaluation never writes to the queue


def test_cached_equals_uncached_loss_and_gradients(tiny_model):
    import copy

    tiny_model.eval()
    features = _features(tiny_model, ANCHORS, POSITIVES, NEGATIVES)
    options = dict(queue_size=40, temperature=0.05, num_hard_negatives=3, hard_negative_share=0.15, symmetric=True)
    with torch.no_grad():
        near = tiny_model(features[0])["sentence_embedding"]
    plain = QueueInfoNCELoss(tiny_model, **options)
    _fill_queue(plain, 40, near=near)
    parts = plain(features, None)
    total = sum(parts.values())
    total.backward()
    expected_grads = _grads(tiny_model)
    tiny_model.zero_grad()

    cached = CachedQueueInfoNCELoss(tiny_model, mini_batch_size=2, **options)
    cached.queue.load_state_dict(copy.deepcopy(plain.queue.state_dict()))
    cached_parts = cached(features, None)
    cached_total = sum(cached_parts.values())
    torch.testing.assert_close(cached_total, total.detach())
    for name in parts:
        torch.testing.assert_close(cached_parts[name].detach(), parts[name].detach(), atol=1e-5, rtol=1e-5)
    cached_total.backward()
    got = _grads(tiny_model)
    assert got.keys() == expected_grads.keys()
    for name in got:
        assert torch.allclose(got[name], expected_grads[name], atol=1e-6, rtol=1e-4), name


def test_cached_training_enqueues(tiny_model):
    tiny_model.train()
    loss = CachedQueueInfoNCELoss(tiny_model, mini_batch_size=2, queue_size=10, num_hard_negatives=2)
    out = loss(_features(tiny_model, ANCHORS, POSITIVES), None)
    sum(out.values()).backward()
    assert len(loss.queue) == 5
    assert any(p.grad is not None for p in tiny_model.parameters())


def test_momentum_encoder_moves_slowly_and_fills_the_queue(tiny_model):
    tiny_model.train()
    loss = QueueInfoNCELoss(tiny_model, queue_size=10, momentum=0.9)
    ema_before = [p.clone() for p in loss.momentum_encoder.model.parameters()]
    with torch.no_grad():
        for p in tiny_model.parameters():
            p.add_(0.1)
    loss(_features(tiny_model, ANCHORS, POSITIVES), None)
    for before, after, online in zip(ema_before, loss.momentum_encoder.model.parameters(), tiny_model.parameters()):
        torch.testing.assert_close(after, 0.9 * before + 0.1 * online.detach())
    assert len(loss.queue) == 5
    assert not any(p.requires_grad for p in loss.momentum_encoder.model.parameters())


def test_bad_arguments(tiny_model):
    with pytest.raises(ValueError, match="temperature"):
        QueueInfoNCELoss(tiny_model, temperature=0.0)
    with pytest.raises(ValueError, match="temperature"):
        QueueInfoNCELoss(tiny_model, temperature=-1)
    with pytest.raises(ValueError, match="num_hard_negatives"):
        QueueInfoNCELoss(tiny_model, queue_size=4, num_hard_negatives=5)
    with pytest.raises(ValueError, match="hard_negative_share"):
        QueueInfoNCELoss(tiny_model, hard_negative_share=1.0)
    with pytest.raises(ValueError, match="momentum"):
        QueueInfoNCELoss(tiny_model, momentum=1.0)
    with pytest.raises(ValueError, match="mini_batch_size"):
        CachedQueueInfoNCELoss(tiny_model, mini_batch_size=0)
    loss = QueueInfoNCELoss(tiny_model, queue_size=4)
    with pytest.raises(ValueError, match="queue_size: 4 is smaller than the .* batch size 5"):
        loss(_features(tiny_model, ANCHORS, POSITIVES), None)
    with pytest.raises(ValueError, match="sentence_features"):
        loss(_features(tiny_model, ANCHORS), None)


def test_nan_loss_is_an_error(tiny_model):
    loss = QueueInfoNCELoss(tiny_model, queue_size=8)
    bad = torch.randn(3, loss.dim)
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN/inf"):
        loss.compute_loss_from_embeddings([bad, torch.randn(3, loss.dim)])


def test_queue_state_round_trip_and_dim_mismatch(tiny_model):
    loss = QueueInfoNCELoss(tiny_model, queue_size=8, momentum=0.99)
    _fill_queue(loss, 6)
    loss.num_steps.fill_(7)
    state = loss.queue_state_dict()
    fresh = QueueInfoNCELoss(tiny_model, momentum=0.99)  # lazily sized queue
    fresh.load_queue_state_dict(state)
    assert fresh.queue.size == 8 and int(fresh.num_steps) == 7
    torch.testing.assert_close(fresh.queue.embeddings, loss.queue.embeddings)
    state["dim"] = loss.dim + 1
    with pytest.raises(ValueError, match="embedding size"):
        fresh.load_queue_state_dict(state)


def test_lazy_queue_uses_the_seed_rule(tiny_model):
    tiny_model.train()
    loss = QueueInfoNCELoss(tiny_model, train_dataset_size=100)
    loss(_features(tiny_model, ANCHORS, POSITIVES), None)
    assert loss.queue.size == 80  # 4 * 100 / 5
    built = build_queue_infonce_loss(tiny_model, train_dataset_size=1000, batch_size=8, num_hard_negatives=2)
    assert built.queue_size == 500 and built.config.mining.num_hard_negatives == 2
    cached = build_cached_queue_infonce_loss(tiny_model, 1000, 8, mini_batch_size=4)
    assert isinstance(cached, CachedQueueInfoNCELoss) and cached.mini_batch_size == 4 and cached.queue_size == 500
    with pytest.raises(ValueError, match="loss_options.cached: .*cached_queue_infonce"):
        build_queue_infonce_loss(tiny_model, 1000, 8, cached=True)


def _pairs(n: int = 24):
    from datasets import Dataset

    return Dataset.from_dict(
        {"anchor": [f"sentence number {i} about topic {i % 5}" for i in range(n)],
         "positive": [f"a paraphrase of sentence {i} on topic {i % 5}" for i in range(n)]}
    )


def test_trainer_checkpoint_and_resume_restore_the_queue(tiny_model, tmp_path):
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    from contrastive_bert.training.queue_checkpoint import QUEUE_STATE_NAME, QueueCheckpointCallback

    def make(max_steps, model):
        loss = QueueInfoNCELoss(model, num_hard_negatives=2, hard_negative_share=0.2)
        args = SentenceTransformerTrainingArguments(
            output_dir=str(tmp_path), max_steps=max_steps, per_device_train_batch_size=4, save_steps=2,
            logging_steps=1, report_to=[], use_cpu=True, learning_rate=1e-3, save_total_limit=None,
            disable_tqdm=True,
        )
        callback = QueueCheckpointCallback(loss)
        trainer = SentenceTransformerTrainer(
            model=model, args=args, train_dataset=_pairs(), loss=loss, callbacks=[callback]
        )
        return trainer, loss, callback

    trainer, loss, _ = make(4, tiny_model)
    trainer.train()
    assert loss.queue.size == 24  # 4 * 24 / 4 from the callback-provided data-set size
    assert len(loss.queue) == 16 and int(loss.num_steps) == 4
    saved = torch.load(tmp_path / "checkpoint-2" / QUEUE_STATE_NAME, weights_only=False)[""]
    assert int(saved["queue"]["queue_fill"]) == 8
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert {"in_batch", "queue", "hard"} <= set(logs[-1])

    import copy

    resumed_model = copy.deepcopy(tiny_model)
    trainer2, loss2, callback2 = make(6, resumed_model)
    trainer2.train(resume_from_checkpoint=str(tmp_path / "checkpoint-4"))
    assert callback2.restored_from.endswith("checkpoint-4")
    assert int(loss2.num_steps) == 6 and len(loss2.queue) == 24  # 16 restored + 2 more steps of 4


def test_trains_with_frozen_layers_and_gradient_checkpointing(tiny_model):
    from contrastive_bert.encoder import LayerwiseEncoder
    from contrastive_bert.training.freezing import freeze_layers

    freeze_layers(tiny_model, 1, freeze_embeddings=True)
    tiny_model[0].auto_model.gradient_checkpointing_enable()
    tiny_model.train()
    loss = QueueInfoNCELoss(tiny_model, queue_size=8)
    sum(loss(_features(tiny_model, ANCHORS, POSITIVES), None).values()).backward()
    encoder = LayerwiseEncoder.from_model(tiny_model)
    assert all(p.grad is None for p in encoder.embeddings.parameters())
    assert all(p.grad is None for p in encoder.layers[0].parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder.layers[1].parameters() if p.ndim > 1)
    assert len(loss.queue) == 5


def test_mine_cli(tiny_model, tmp_path, monkeypatch):
    import json

    from contrastive_bert.cli import mine

    source = tmp_path / "pairs.jsonl"
    rows = [{"anchor": f"question {i} about {w}", "positive": f"answer {i} on {w}"} for i, w in enumerate("abcdefghijkl")]
    source.write_text("\n".join(json.dumps(r) for r in rows))
    monkeypatch.setattr("contrastive_bert.models.load_model", lambda *a, **k: tiny_model)
    parser = argparse.ArgumentParser()
    mine.add_parser(parser.add_subparsers())
    output = tmp_path / "mined.jsonl"
    args = parser.parse_args(["mine", "--dataset", str(source), "--output", str(output), "--num-negatives", "2",
                              "--relative-margin", "0"])
    assert args.func(args) == 0
    mined = [json.loads(line) for line in output.read_text().splitlines()]
    assert mined and set(mined[0]) == {"anchor", "positive", "negative"}
    assert all(r["negative"] != r["positive"] for r in mined)
    with pytest.raises(ValueError, match="output: .* already exists"):
        args.func(args)
    args = parser.parse_args(["mine", "--dataset", str(source), "--output", str(output), "--num-negatives", "0"])
    with pytest.raises(ValueError, match="num-negatives"):
        args.func(args)


@pytest.mark.parametrize("backend", ["torch", "faiss"])
def test_hard_negatives_only_mode_matches_reference(tiny_model, backend):
    """ANCE style (use_queue_negatives=False): batch + k mined rows; FAISS and torch agree."""
    from contrastive_bert.topk_search import faiss_available

    if backend == "faiss" and not faiss_available():
        pytest.skip("faiss not installed")
    torch.manual_seed(1)
    loss = QueueInfoNCELoss(tiny_model, queue_size=50, temperature=0.1, num_hard_negatives=5,
                            use_queue_negatives=False, relative_margin=None, mining_backend=backend)
    anchors, positives = torch.randn(4, loss.dim), torch.randn(4, loss.dim)
    _fill_queue(loss, 50, near=anchors)
    parts = loss.compute_loss_from_embeddings([anchors, positives])
    queue = loss.queue.queue_embeddings[:50]
    hard_idx = torch.topk(F.normalize(anchors, dim=1) @ queue.T, 5, dim=1).indices
    keep = torch.zeros(4, 50, dtype=torch.bool)  # no other queue rows
    expected = _reference_loss(anchors, positives, queue, hard_idx, keep, 0.1, None)
    assert math.isclose(float(sum(parts.values())), expected, rel_tol=1e-5)
    assert parts["queue"].item() == 0 and parts["hard"] > 0


def test_same_label_rows_are_not_negatives(tiny_model):
    torch.manual_seed(2)
    anchors, positives = torch.randn(3, 32), torch.randn(3, 32)
    rows = torch.randn(10, 32)
    labels = torch.tensor([1, 2] * 5)
    filtered = QueueInfoNCELoss(tiny_model, queue_size=10, filter_same_label=True, relative_margin=None)
    filtered.queue.enqueue(rows, labels=labels)
    only_other = QueueInfoNCELoss(tiny_model, queue_size=10, relative_margin=None)
    only_other.queue.enqueue(rows[labels == 2])
    got = sum(filtered.compute_loss_from_embeddings([anchors, positives], labels=torch.tensor([1, 1, 1])).values())
    expected = sum(only_other.compute_loss_from_embeddings([anchors, positives]).values())
    torch.testing.assert_close(got, expected)
    # float labels (e.g. STS scores) are not class labels: no label filtering
    unfiltered = sum(filtered.compute_loss_from_embeddings([anchors, positives], labels=torch.tensor([1.0, 1.0, 1.0])).values())
    assert unfiltered > got


def test_other_positives_of_the_same_anchor_are_not_negatives(tiny_model):
    """A query with two correct answers: the first answer, queued, is no negative for the second pair."""
    tiny_model.train()
    question = "who wrote the iron lady biography?"
    first = _features(tiny_model, [question, "a question about cats"], ["hugo young wrote it", "cats purr"])
    second = _features(tiny_model, [question, "what is the capital of peru?"], ["the author is hugo young", "lima"])

    def queue_part(filter_same_anchor: bool) -> float:
        torch.manual_seed(0)
        loss = QueueInfoNCELoss(tiny_model, queue_size=8, relative_margin=None, filter_same_anchor=filter_same_anchor)
        loss(first, None)  # training step: enqueues "hugo young wrote it" (anchor: the question) and "cats purr"
        assert len(loss.queue) == 2
        tiny_model.eval()  # score the second batch without enqueuing
        try:
            with torch.no_grad():
                parts = loss(second, None)
        finally:
            tiny_model.train()
        return float(parts["queue"])

    kept, dropped = queue_part(False), queue_part(True)
    # with the filter the question's own earlier answer leaves its row's negatives: the queue adds less
    assert dropped < kept
    assert dropped > 0  # "cats purr" (another anchor) is still a negative


def test_the_docstring_example_trains(monkeypatch, tmp_path, tiny_model):
    """The class docstring's ``Example::`` runs as written (the tiny model stands in for the bundled one)."""
    example = textwrap.dedent(QueueInfoNCELoss.__doc__.split("Example:\n        ::\n")[1])
    monkeypatch.setattr("contrastive_bert.models.load_model", lambda name: tiny_model)
    monkeypatch.chdir(tmp_path)  # the trainer's default output folder
    namespace: dict = {}
    exec(compile(example, "QueueInfoNCELoss.__doc__", "exec"), namespace)
    assert namespace["trainer"].state.global_step == 3  # 3 epochs (the trainer's default) of one batch of 2
    assert len(namespace["loss"].queue) == 6 and namespace["loss"].queue_size == 1024
