"""ACL-CL / KD / CE multi-exit losses: hand-checked values, gradients, training paths, errors."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from contrastive_bert.heads.exits import add_exit_heads, exit_outputs, get_exit_heads
from contrastive_bert.losses.cross_layer import (
    CrossLayerLoss,
    adaptive_layer_baseline,
    cross_layer_contrastive_loss,
    logit_kd_loss,
)
from contrastive_bert.heads.label_embedding import LabelEmbeddingClassifier
from contrastive_bert.losses.supcon import supervised_contrastive_loss

LABELS = ["a", "b", "c"]
TEXTS = ["the card never arrived", "how do I top up", "great service thanks", "my pin is blocked",
         "top up failed", "card arrived broken"]


@pytest.fixture(scope="module")
def _tiny4_session(tmp_path_factory):
    from conftest import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny4_cl"), num_layers=4)


@pytest.fixture()
def tiny4(_tiny4_session):
    return copy.deepcopy(_tiny4_session)


def test_cross_layer_contrastive_by_hand():
    # rows: s=[1,0] (y=0), l_s=[[1,0],[0,1]], t=[1,0] (y=0), l_t=[[1,0],[0,1]], tau=1
    e1, e2 = torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    loss = cross_layer_contrastive_loss(e1, e2, e1.clone(), e2.clone(), torch.tensor([0]), temperature=1.0)
    # 4 class-0 rows (identical): 3 positives at cos 1, 2 negatives at cos 0 -> log(3e + 2) - 1
    # 2 class-1 rows: 1 positive at cos 1, 4 negatives at cos 0 -> log(e + 4) - 1
    expected = (4 * (math.log(3 * math.e + 2) - 1) + 2 * (math.log(math.e + 4) - 1)) / 6
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_cross_layer_contrastive_is_supcon_of_augmented_batch():
    torch.manual_seed(0)
    s, t = torch.randn(5, 4), torch.randn(5, 4)
    ls, lt = torch.randn(3, 4), torch.randn(3, 4)
    y = torch.tensor([0, 1, 2, 0, 1])
    k = torch.arange(3)
    expected = supervised_contrastive_loss(torch.cat([s, ls, t, lt]), torch.cat([y, k, y, k]), 0.5)
    torch.testing.assert_close(cross_layer_contrastive_loss(s, ls, t, lt, y, 0.5), expected)
    with pytest.raises(ValueError, match="embeddings"):
        cross_layer_contrastive_loss(s, ls, t[:, :2], lt, y)


def test_logit_kd_by_hand():
    student = torch.tensor([[0.0, 0.0]])
    teacher = torch.tensor([[math.log(3.0), 0.0]])  # p_t = [0.75, 0.25], p_s = [0.5, 0.5]
    expected = 0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.5)
    assert logit_kd_loss(student, teacher, temperature=1.0).item() == pytest.approx(expected, rel=1e-6)
    # T^2 scaling: at T=2 the logits halve
    t2 = 0.5 * math.log(3.0)
    p = torch.tensor([math.exp(t2), 1.0]) / (math.exp(t2) + 1.0)
    expected2 = 4 * float((p * torch.log(p / 0.5)).sum())
    assert logit_kd_loss(student, teacher, temperature=2.0).item() == pytest.approx(expected2, rel=1e-5)
    assert logit_kd_loss(teacher, teacher).item() == pytest.approx(0.0, abs=1e-7)


def _outputs(model):
    model.eval()
    features = model.preprocess(TEXTS)
    return exit_outputs(model, features)


@pytest.mark.parametrize("method", ["ce", "kd", "acl_cl"])
def test_loss_parts_match_definitions(tiny4, method):
    heads = add_exit_heads(tiny4, LABELS, exit_layers=[1, 2], head_type="mha")
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    out = _outputs(tiny4)
    emb, logits = out["exit_embeddings"], out["exit_logits"]
    loss = CrossLayerLoss(tiny4, method=method, weight=0.7, final_contrastive_weight=0.1, freeze_backbone=False)
    parts = loss.compute_loss_from_outputs(emb, logits, labels)
    l_final = heads.final_exit.classifier.label_embeddings(normalized=True)
    final = F.cross_entropy(logits[4], labels) + 0.1 * supervised_contrastive_loss(
        torch.cat([emb[4], l_final]), torch.cat([labels, torch.arange(3)]), 0.5
    )
    torch.testing.assert_close(parts["final"], final)
    torch.testing.assert_close(parts["exit_ce"], sum(F.cross_entropy(logits[m], labels) for m in (1, 2)))
    if method == "ce":
        assert "distill" not in parts
        return
    if method == "kd":
        distill = sum(logit_kd_loss(logits[m], logits[4], 2.0) for m in (1, 2))
    else:
        distill = sum(
            cross_layer_contrastive_loss(emb[m], heads.exit(m).classifier.label_embeddings(normalized=True),
                                         emb[4], l_final, labels, 0.5)
            for m in (1, 2)
        )
    torch.testing.assert_close(parts["distill"], 0.7 * distill)


def test_teacher_detached_in_distillation(tiny4):
    add_exit_heads(tiny4, LABELS, exit_layers=[1])
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    out = _outputs(tiny4)
    loss = CrossLayerLoss(tiny4, method="acl_cl", freeze_backbone=False)
    parts = loss.compute_loss_from_outputs(out["exit_embeddings"], out["exit_logits"], labels)
    final_weight = get_exit_heads(tiny4).final_exit.classifier.weight
    grad = torch.autograd.grad(parts["distill"], final_weight, allow_unused=True)[0]
    assert grad is None or torch.count_nonzero(grad) == 0
    student_weight = get_exit_heads(tiny4).exit(1).classifier.weight
    assert torch.count_nonzero(torch.autograd.grad(parts["distill"], student_weight)[0]) > 0


def _recipe(steps: int, batch_size: int, learning_rate: float):
    from contrastive_bert.training.recipe import TrainingRecipe

    return TrainingRecipe(max_steps=steps, batch_size=batch_size, learning_rate=learning_rate, dev_task=None,
                          eval_tasks=[], save_steps=1000, logging_steps=1000, warmup_ratio=0.0)


def test_stage2_trains_only_intermediate_exits(tiny4, tmp_path):
    from datasets import Dataset

    from contrastive_bert.training.runner import fit

    tiny4.append(LabelEmbeddingClassifier(32, LABELS))
    loss = CrossLayerLoss(tiny4, method="acl_cl", exit_layers=[1, 2], exit_head="linear")  # attaches the exits
    heads = get_exit_heads(tiny4)
    assert heads.exit_layers == [1, 2] and heads.head_layers == [1, 2, 4]
    torch.testing.assert_close(heads.final_exit.classifier.weight, tiny4[2].weight)  # the trained classifier
    trainable = {name for name, p in tiny4.named_parameters() if p.requires_grad}
    assert trainable and all(".exits.1." in n or ".exits.2." in n for n in trainable)
    before = {name: p.detach().clone() for name, p in tiny4.named_parameters()}
    data = Dataset.from_dict({"text": TEXTS * 2, "label": [0, 1, 2] * 4})
    fit(tiny4, data, loss, _recipe(2, 6, 1e-2), str(tmp_path))
    for name, p in tiny4.named_parameters():
        if name not in trainable:
            assert torch.equal(p.detach(), before[name]), f"frozen parameter {name} changed"
    assert any(not torch.equal(p.detach(), before[n]) for n, p in tiny4.named_parameters() if n in trainable)


def test_frozen_backbone_runs_without_dropout(tiny4):
    """Stage 2 (frozen backbone): the backbone's dropout is off even in train mode, so two calls give
    the same loss (linear exits have no dropout of their own); joint training keeps dropout on."""
    from contrastive_bert.encoder import transformer_module

    tiny4.append(LabelEmbeddingClassifier(32, LABELS))
    assert transformer_module(tiny4).auto_model.config.hidden_dropout_prob > 0
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    features = tiny4.preprocess(TEXTS)

    def total(loss):
        torch.manual_seed(len(total.calls))
        total.calls.append(1)
        return sum(v for v in loss([dict(features)], labels).values()).item()

    total.calls = []
    frozen = CrossLayerLoss(tiny4, method="acl_cl", exit_layers=[1, 2], exit_head="linear")
    tiny4.train()
    assert total(frozen) == total(frozen)
    assert transformer_module(tiny4).training  # mode restored after the forward
    joint = CrossLayerLoss(tiny4, method="acl_cl", freeze_backbone=False)
    assert total(joint) != total(joint)


def test_joint_training_and_adaptive_layer_baseline_run(tiny4, tmp_path):
    from datasets import Dataset

    from contrastive_bert.training.runner import fit

    data = Dataset.from_dict({"text": TEXTS * 2, "label": [0, 1, 2] * 4})
    baseline_model = copy.deepcopy(tiny4)
    loss = CrossLayerLoss(tiny4, method="kd", exit_layers=[2], exit_head="mha", freeze_backbone=False, label_names=LABELS)
    before = tiny4[0].auto_model.encoder.layer[0].output.dense.weight.detach().clone()
    fit(tiny4, data, loss, _recipe(2, 6, 1e-3), str(tmp_path / "joint"))
    assert not torch.equal(before, tiny4[0].auto_model.encoder.layer[0].output.dense.weight)  # backbone trained
    adaptive = adaptive_layer_baseline(baseline_model, LABELS)
    fit(baseline_model, data, adaptive, _recipe(2, 6, 1e-3), str(tmp_path / "adaptive"))


def test_stage2_learns_through_the_trainer(tiny4, tmp_path):
    from datasets import Dataset

    from contrastive_bert.training.multi_exit import evaluate_exits
    from contrastive_bert.training.runner import fit

    # the tiny fixture's tokenizer maps words to [UNK]: the class is told by the text length
    texts = [" ".join(["word"] * n) for _ in range(12) for n in (1, 4, 9)]
    labels = [0, 1, 2] * 12
    tiny4.append(LabelEmbeddingClassifier(32, LABELS))
    loss = CrossLayerLoss(tiny4, method="acl_cl", exit_layers=[1, 2], exit_head="linear")
    chance = evaluate_exits(tiny4, texts, labels)
    fit(tiny4, Dataset.from_dict({"text": texts, "label": labels}), loss, _recipe(60, 12, 5e-2), str(tmp_path))
    accuracy = evaluate_exits(tiny4, texts, labels)
    assert accuracy[2] > 60.0 and accuracy[2] > chance[2]  # the exit learns the length (chance is 33%)
    assert accuracy[4] == chance[4]  # the frozen final classifier did not move


def test_bad_options_and_arguments(tiny4):
    check = CrossLayerLoss.check_options
    for options, field in [({"method": "mse"}, "method"), ({"exit_head": "conv"}, "exit_head"),
                           ({"exit_layers": [0, 2]}, "exit_layers"), ({"exit_layers": [2, 2]}, "exit_layers"),
                           ({"exit_layers": "2"}, "exit_layers"), ({"head_dim": 30}, "head_dim"),
                           ({"temperature": 0}, "temperature"), ({"weight": -1}, "weight"),
                           ({"freeze_backbone": "yes"}, "freeze_backbone")]:
        with pytest.raises(ValueError, match=f"^loss_options.{field}: "):
            check(options)
    check({"method": "kd", "exit_layers": [1, 2], "exit_head": "mha", "head_dim": 32, "temperature": 0.3, "weight": 0.5})
    with pytest.raises(ValueError, match="model: has no classifier"):
        CrossLayerLoss(tiny4)
    tiny4.append(LabelEmbeddingClassifier(32, LABELS))
    with pytest.raises(ValueError, match="loss_options.exit_layers: layer 4 is the last layer"):
        CrossLayerLoss(tiny4, exit_layers=[2, 4])
    with pytest.raises(ValueError, match="loss_options.exit_layers: layers \\[5\\] are out of range"):
        CrossLayerLoss(tiny4, exit_layers=[5])
    with pytest.raises(ValueError, match="method"):
        CrossLayerLoss(tiny4, method="mse")
    loss = CrossLayerLoss(tiny4, exit_layers=[1])
    with pytest.raises(ValueError, match="exit_weights"):
        CrossLayerLoss(tiny4, exit_weights={3: 1.0})
    out = _outputs(tiny4)
    with pytest.raises(ValueError, match="labels"):
        loss.compute_loss_from_outputs(out["exit_embeddings"], out["exit_logits"], torch.tensor([0, 1, 2, 3, 0, 1]))
    with pytest.raises(ValueError, match="labels"):
        loss.compute_loss_from_outputs(out["exit_embeddings"], out["exit_logits"], torch.ones(6))
