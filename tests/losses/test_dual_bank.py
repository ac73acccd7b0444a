"""The optimizer-step boundary of the queue losses and the dual memory bank (ContAccum):
MNRL at one micro-batch, the paper's formula on a hand-built case, gradients only through the
micro-batch's own rows, an empty bank after each optimizer step, one EMA update and one step count
per optimizer step under gradient accumulation, a restored FIFO bank, triplets."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

import contrastive_bert.losses.queue_infonce as queue_infonce_module
from contrastive_bert.losses import CachedQueueInfoNCELoss, QueueInfoNCELoss
from contrastive_bert.memory_bank import DualMemoryBank

ANCHORS = ["a cat sits on the mat", "the dog runs fast", "the sky is blue today", "I like green tea"]
POSITIVES = ["a kitten rests on a rug", "a dog is running", "blue sky", "tea is what I love"]
NEGATIVES = ["a car drives by", "stocks fell", "it rains", "coffee is bitter"]
EXACT = {"temperature": 0.05, "relative_margin": None}  # no score filter: the paper's formula as it is


@pytest.fixture()
def sync(monkeypatch):
    """Control the trainer's "last micro-batch of the optimizer step" signal: ``sync[0] = False``."""
    flag = [True]
    monkeypatch.setattr(queue_infonce_module, "is_optimizer_sync_step", lambda: flag[0])
    return flag


def _features(model, *columns):
    return [model.preprocess(list(column)) for column in columns]


def _unit(n: int, dim: int, seed: int) -> torch.Tensor:
    return torch.randn(n, dim, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("columns", [(ANCHORS, POSITIVES), (ANCHORS, POSITIVES, NEGATIVES)], ids=["pairs", "triplets"])
def test_step_scope_at_one_micro_batch_is_mnrl(tiny_model, sync, columns):
    """K = 1: the bank is emptied after every call, so every call is MNRL's loss, in training too."""
    tiny_model.train()
    for module in tiny_model.modules():  # no dropout: both losses see the same embeddings
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    loss = QueueInfoNCELoss(tiny_model, dual_bank=True, bank_scope="step", **EXACT)
    mnrl = MultipleNegativesRankingLoss(tiny_model, scale=20.0)
    for start in (0, 2):
        features = _features(tiny_model, *(column[start:start + 2] for column in columns))
        parts = loss(features, None)
        assert parts["bank"] == 0 and len(loss.bank) == 0
        torch.testing.assert_close(sum(parts.values()), mnrl(features, None))
    assert int(loss.num_steps) == 2


def test_second_micro_batch_has_the_papers_loss_and_only_its_own_gradients(tiny_model, sync):
    """Two micro-batches of two rows in one optimizer step: the second call's loss is ContAccum's
    InfoNCE over Q = [q3, q4, sg(q1), sg(q2)] x P = [p3, p4, sg(p1), sg(p2)], the mean over its four
    rows; gradient reaches only the second micro-batch's embeddings; the step then empties the bank."""
    loss = QueueInfoNCELoss(tiny_model, dual_bank=True, bank_scope="step", **EXACT)
    dim = loss.dim
    q1, p1 = _unit(2, dim, 0).requires_grad_(), _unit(2, dim, 1).requires_grad_()
    q2, p2 = _unit(2, dim, 2).requires_grad_(), _unit(2, dim, 3).requires_grad_()
    ids = [torch.tensor([11, 12]), torch.tensor([21, 22])]
    sync[0] = False
    first = loss.compute_loss_from_embeddings([q1, p1], anchor_ids=ids[0], positive_ids=ids[1], doc_ids=ids[1])
    loss.bank_training_rows([q1, p1], ids, None)
    assert len(loss.bank) == 2 and int(loss.num_steps) == 0
    ids2 = [torch.tensor([13, 14]), torch.tensor([23, 24])]
    parts = loss.compute_loss_from_embeddings([q2, p2], anchor_ids=ids2[0], positive_ids=ids2[1], doc_ids=ids2[1])
    total = sum(parts.values())

    queries = F.normalize(torch.cat([q2, q1.detach()]), dim=1)
    passages = F.normalize(torch.cat([p2, p1.detach()]), dim=1)
    expected = F.cross_entropy(queries @ passages.T / 0.05, torch.arange(4))
    torch.testing.assert_close(total, expected)
    mnrl_first = F.cross_entropy(F.normalize(q1, dim=1) @ F.normalize(p1, dim=1).T / 0.05, torch.arange(2))
    torch.testing.assert_close(sum(first.values()), mnrl_first)  # the first call: an empty bank, MNRL
    grads = torch.autograd.grad(total, [q2, p2], retain_graph=True)
    reference = torch.autograd.grad(expected, [q2, p2])
    for got, want in zip(grads, reference):
        torch.testing.assert_close(got, want)
    total.backward()
    assert q1.grad is None and p1.grad is None  # banked rows are constants
    sync[0] = True
    loss.bank_training_rows([q2, p2], ids2, None)
    assert len(loss.bank) == 0 and int(loss.num_steps) == 1


def test_banked_anchor_rows_reach_the_documents(tiny_model, sync):
    """The ``bank`` part alone has gradient on this batch's documents, none on its anchors."""
    loss = QueueInfoNCELoss(tiny_model, dual_bank=True, bank_scope="step", **EXACT)
    sync[0] = False
    loss.bank_training_rows([_unit(3, loss.dim, 0), _unit(3, loss.dim, 1)], None, None)
    anchors, docs = _unit(2, loss.dim, 2).requires_grad_(), _unit(2, loss.dim, 3).requires_grad_()
    parts = loss.compute_loss_from_embeddings([anchors, docs])
    anchor_grad, doc_grad = torch.autograd.grad(parts["bank"], [anchors, docs], allow_unused=True)
    assert anchor_grad is None and doc_grad.abs().sum() > 0


def test_triplets_bank_negatives_as_documents_and_filter_other_positives(tiny_model, sync):
    """Mined negatives are banked as documents (C = 2 per row); a banked row of the same anchor
    text (another positive of that query) is not a negative of the local anchor, nor is the local
    positive a negative of that banked row."""
    loss = QueueInfoNCELoss(tiny_model, dual_bank=True, bank_scope="fifo", queue_size=8, **EXACT)
    dim = loss.dim
    sync[0] = False
    q1, p1, n1 = _unit(2, dim, 0), _unit(2, dim, 1), _unit(2, dim, 2)
    loss.bank_training_rows([q1, p1, n1], [torch.tensor([1, 2]), torch.tensor([31, 32]), torch.tensor([41, 42])], None)
    contents = loss.bank.contents()
    assert contents.documents.shape == (2, 2, dim) and len(contents.flat_documents()[0]) == 4
    # micro-batch 2: its first anchor has the text of banked anchor 1 (id 1), with another positive
    q2, p2, n2 = _unit(2, dim, 3), _unit(2, dim, 4), _unit(2, dim, 5)
    ids = [torch.tensor([1, 3]), torch.tensor([33, 34]), torch.tensor([43, 44])]
    total = sum(loss.compute_loss_from_embeddings([q2, p2, n2], anchor_ids=ids[0], positive_ids=ids[1],
                                                  doc_ids=torch.cat(ids[1:])).values())
    Q = F.normalize(torch.cat([q2, q1]), dim=1)
    local_docs = F.normalize(torch.cat([p2, n2]), dim=1)  # column-major: positives, then negatives
    bank_docs = F.normalize(torch.stack([p1, n1], dim=1).reshape(4, dim), dim=1)  # row-major: p1_0, n1_0, p1_1, n1_1
    logits = Q @ torch.cat([local_docs, bank_docs]).T / 0.05
    keep = torch.ones_like(logits, dtype=torch.bool)
    keep[0, 4] = False  # local anchor 0 (text 1): banked positive of the same text
    keep[2, 0] = False  # banked anchor 0 (text 1): the local positive of the same text
    positives = torch.tensor([0, 1, 4, 6])
    expected = F.cross_entropy(logits.masked_fill(~keep, -torch.inf), positives)
    torch.testing.assert_close(total, expected)


def test_fifo_bank_survives_a_checkpoint(tiny_model, sync):
    loss = QueueInfoNCELoss(tiny_model, dual_bank=True, bank_scope="fifo", queue_size=4, **EXACT)
    for seed in range(3):  # 6 rows into a ring of 4
        loss.bank_training_rows([_unit(2, loss.dim, seed), _unit(2, loss.dim, 10 + seed)], None, None)
    state = loss.queue_state_dict()
    restored = QueueInfoNCELoss(tiny_model, dual_bank=True, bank_scope="fifo", **EXACT)
    restored.load_queue_state_dict(state)
    a, b = loss.bank.contents(), restored.bank.contents()
    assert len(restored.bank) == 4 and int(restored.num_steps) == 3
    torch.testing.assert_close(a.anchors, b.anchors)
    torch.testing.assert_close(a.documents, b.documents)
    with pytest.raises(ValueError, match="dual_bank=False"):
        QueueInfoNCELoss(tiny_model, queue_size=4).load_queue_state_dict(state)


def test_step_bank_grows_to_hold_a_step_and_refuses_a_new_column_count():
    bank = DualMemoryBank(2, 4, growable=True)
    for _ in range(3):
        bank.append(torch.randn(2, 4), torch.randn(2, 1, 4))
    assert len(bank) == 6 and bank.size == 8
    with pytest.raises(ValueError, match="same number of document columns"):
        bank.append(torch.randn(2, 4), torch.randn(2, 2, 4))
    ring = DualMemoryBank(4, 4)
    for i in range(3):
        ring.append(torch.full((2, 4), float(i + 1)), torch.randn(2, 1, 4))
    assert len(ring) == 4 and ring.contents().anchors[:, 0].tolist() == pytest.approx([0.5, 0.5, 0.5, 0.5])


def test_cached_loss_with_a_dual_bank_equals_the_plain_one(tiny_model, sync):
    """GradCache over a dual bank: the same loss as the plain loss with the same bank."""
    import copy

    tiny_model.eval()
    features = _features(tiny_model, ANCHORS, POSITIVES)
    plain = QueueInfoNCELoss(tiny_model, dual_bank=True, bank_scope="fifo", queue_size=8, **EXACT)
    cached = CachedQueueInfoNCELoss(copy.deepcopy(tiny_model), mini_batch_size=2, dual_bank=True, bank_scope="fifo",
                                    queue_size=8, **EXACT)
    for loss in (plain, cached.loss):
        loss.bank_training_rows([_unit(3, loss.dim, 0), _unit(3, loss.dim, 1)], None, None)
    expected = plain(features, None)
    got = cached(features, None)
    assert set(got) == set(expected) == {"in_batch", "queue", "hard", "bank"}
    torch.testing.assert_close(sum(got.values()), sum(expected.values()))


def test_options_that_a_dual_bank_refuses(tiny_model):
    with pytest.raises(ValueError, match="loss_options.momentum"):
        QueueInfoNCELoss(tiny_model, dual_bank=True, momentum=0.99)
    with pytest.raises(ValueError, match="loss_options.bank_scope"):
        QueueInfoNCELoss(tiny_model, bank_scope="epoch")
    with pytest.raises(ValueError, match="loss_options.guide_model"):
        QueueInfoNCELoss(tiny_model, dual_bank=True, guide_model=tiny_model)


def _pairs(n: int = 16):
    from datasets import Dataset

    return Dataset.from_dict({"anchor": [f"question number {i}" for i in range(n)],
                              "positive": [f"the answer to question {i}" for i in range(n)]})


@pytest.mark.parametrize("options", [{"momentum": 0.9, "queue_size": 16}, {"dual_bank": True, "bank_scope": "step"}],
                         ids=["momentum-queue", "dual-step"])
def test_accumulation_counts_optimizer_steps(tiny_model, tmp_path, options):
    """gradient_accumulation_steps = 2: one EMA update and one step count per optimizer step (not
    per micro-batch), and a step-scoped bank is empty after every optimizer step."""
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from transformers import TrainerCallback

    loss = QueueInfoNCELoss(tiny_model, **options)
    ema_updates, bank_after_step, calls = [], [], []
    if loss.momentum_encoder is not None:
        update = loss.momentum_encoder.update
        loss.momentum_encoder.update = lambda model: (ema_updates.append(1), update(model))
    forward = loss.forward
    loss.forward = lambda *a, **k: (calls.append(1), forward(*a, **k))[1]

    class AfterStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            bank_after_step.append(None if loss.bank is None else len(loss.bank))

    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=2, gradient_accumulation_steps=2,
        logging_steps=1, report_to=[], use_cpu=True, learning_rate=1e-3, save_strategy="no", disable_tqdm=True,
    )
    trainer = SentenceTransformerTrainer(model=tiny_model, args=args, train_dataset=_pairs(), loss=loss, callbacks=[AfterStep()])
    trainer.train()
    assert trainer.state.global_step == 3 and len(calls) == 6
    assert int(loss.num_steps) == 3
    if loss.momentum_encoder is not None:
        assert len(ema_updates) == 3
    else:
        assert bank_after_step == [0, 0, 0]
