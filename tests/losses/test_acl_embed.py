"""ACLEmbedLoss: SupCon values by hand, ACL-Grad gating and angle, accumulation, DDP reduction, training."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from contrastive_bert.heads.label_embedding import attach_label_head, find_label_head
from contrastive_bert.losses import ACLEmbedLoss
from contrastive_bert.losses.acl_grad import gradient_angle
from contrastive_bert.losses.supcon import supervised_contrastive_loss

LABELS = ["card", "top up", "transfer"]
TEXTS = [
    "my card was declined at the shop",
    "the card payment failed again",
    "how do I top up my account",
    "top up with a bank transfer please",
    "my transfer has not arrived",
    "where is the money I transferred",
]
Y = [0, 0, 1, 1, 2, 2]


def _features(model, texts=TEXTS):
    return [model.preprocess(texts)]


def _reference_supcon(z: torch.Tensor, y: list[int], tau: float) -> float:
    """Loop form of SupCon L_out on normalised rows."""
    z = F.normalize(z.double(), dim=-1)
    total, anchors = 0.0, 0
    for i in range(len(y)):
        positives = [p for p in range(len(y)) if p != i and y[p] == y[i]]
        if not positives:
            continue
        denominator = sum(math.exp(float(z[i] @ z[a]) / tau) for a in range(len(y)) if a != i)
        total += -sum(float(z[i] @ z[p]) / tau - math.log(denominator) for p in positives) / len(positives)
        anchors += 1
    return total / anchors


# ----------------------------------------------------------------------------- SupCon values


def test_supcon_hand_computed_value():
    # z0 = z2 = (1, 0) (class 0), z1 = (0, 1) (class 1, no positive -> not an anchor), tau = 0.5:
    # anchors 0 and 2: -(2 - log(e^0 + e^2)) each -> log(1 + e^2) - 2
    z = torch.tensor([[1.0, 0.0], [0.0, 3.0], [2.0, 0.0]])
    value = supervised_contrastive_loss(z, torch.tensor([0, 1, 0]), temperature=0.5)
    assert value.item() == pytest.approx(math.log(1 + math.e**2) - 2, abs=1e-6)


def test_supcon_with_label_anchors_hand_computed():
    # samples h0 = (1, 0) class 0, h1 = (0, 1) class 1; label embeddings l0 = (1, 0), l1 = (0, 1); tau = 1.
    # every row has exactly one positive at cos 1 and two negatives at cos 0:
    # each anchor: -(1 - log(e^1 + 1 + 1)) -> log(e + 2) - 1
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    value = supervised_contrastive_loss(z, torch.tensor([0, 1, 0, 1]), temperature=1.0)
    assert value.item() == pytest.approx(math.log(math.e + 2) - 1, abs=1e-6)


def test_supcon_matches_loop_reference_and_no_positive_is_zero():
    torch.manual_seed(0)
    z, y = torch.randn(7, 5), [0, 1, 0, 2, 1, 1, 3]
    value = supervised_contrastive_loss(z, torch.tensor(y), temperature=0.3)
    assert value.item() == pytest.approx(_reference_supcon(z, y, 0.3), rel=1e-5)
    zero = supervised_contrastive_loss(z[:3].requires_grad_(), torch.tensor([0, 1, 2]))
    assert zero.item() == 0.0 and zero.requires_grad


def test_acl_contrastive_term_is_supcon_over_samples_and_label_embeddings(tiny_model):
    loss = ACLEmbedLoss(tiny_model, LABELS, temperature=0.5)
    head = find_label_head(tiny_model)
    torch.manual_seed(0)
    h = torch.randn(6, head.in_features)
    y = torch.tensor(Y)
    expected = _reference_supcon(torch.cat([h, head.weight.detach()]), Y + [0, 1, 2], 0.5)
    assert loss.contrastive_term(h, y).item() == pytest.approx(expected, rel=1e-5)
    plain = ACLEmbedLoss(tiny_model, LABELS, mode="supcon")
    assert plain.contrastive_term(h, y).item() == pytest.approx(_reference_supcon(h, Y, 0.5), rel=1e-5)


# ----------------------------------------------------------------------------- ACL-Grad


def _param_grads(model, loss_fn, texts=TEXTS, y=Y):
    model.zero_grad(set_to_none=True)
    parts = loss_fn(_features(model, texts), torch.tensor(y))
    torch.stack(list(parts.values())).sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, parts


def _assert_same_grads(a, b):
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-7, msg=name)


def test_gating_keeps_or_drops_contrastive_gradient_at_the_measured_angle(tiny_model):
    tiny_model.eval()  # no dropout: identical forwards
    weight = 0.5  # large so the two gradients differ clearly
    gated = ACLEmbedLoss(tiny_model, LABELS, contrastive_weight=weight, angle_threshold=180.0, angle_parameters="all")
    grads_kept, _ = _param_grads(tiny_model, gated)
    angle = gated.angle_history[-1]["angle"]
    assert 0.0 < angle < 180.0 and not gated.angle_history[-1]["gated"]

    ungated = ACLEmbedLoss(tiny_model, LABELS, contrastive_weight=weight, gradient_gating=False)
    ce_only = ACLEmbedLoss(tiny_model, LABELS, mode="ce")
    grads_full, _ = _param_grads(tiny_model, ungated)
    grads_ce, _ = _param_grads(tiny_model, ce_only)
    _assert_same_grads(grads_kept, grads_full)

    gated.angle_threshold = angle + 0.01  # angle <= threshold: contrastive gradient kept
    grads, parts = _param_grads(tiny_model, gated)
    assert not gated.angle_history[-1]["gated"]
    _assert_same_grads(grads, grads_full)

    gated.angle_threshold = angle - 0.01  # angle > threshold: exactly the CE gradient
    grads, parts = _param_grads(tiny_model, gated)
    assert gated.angle_history[-1]["gated"] and gated.angle_history[-1]["weight"] == 0.0
    _assert_same_grads(grads, grads_ce)
    assert any(not torch.allclose(grads_full[n], grads_ce[n]) for n in grads_ce)
    # the logged parts are the objective's values either way
    assert set(parts) == {"ce", "contrastive"}
    assert parts["contrastive"].item() > 0


def test_angle_matches_direct_computation(tiny_model):
    tiny_model.eval()
    loss = ACLEmbedLoss(tiny_model, LABELS, contrastive_weight=0.02, angle_parameters="all")
    ce, contrastive = loss.compute_terms(_features(tiny_model), torch.tensor(Y))
    params = [p for p in tiny_model.parameters() if p.requires_grad]
    g_ce = torch.autograd.grad(ce, params, retain_graph=True, allow_unused=True)
    g_con = torch.autograd.grad(contrastive, params, allow_unused=True)
    shared = [(a.flatten(), b.flatten()) for a, b in zip(g_ce, g_con) if a is not None and b is not None]
    a = torch.cat([x for x, _ in shared]).double()
    b = torch.cat([y for _, y in shared]).double()
    expected = math.degrees(math.acos(float(a @ b / (a.norm() * b.norm()))))
    _param_grads(tiny_model, loss)
    assert loss.angle_history[-1]["angle"] == pytest.approx(expected, abs=1e-3)
    # the head's weight is shared by both terms and enters the angle
    head = find_label_head(tiny_model)
    index = next(i for i, p in enumerate(params) if p is head.weight)
    assert g_ce[index] is not None and g_con[index] is not None


def test_gradient_accumulation_decides_on_summed_gradients(tiny_model):
    from accelerate.state import GradientState

    tiny_model.eval()
    texts_a, y_a, texts_b, y_b = TEXTS[:4], Y[:4], TEXTS[2:], Y[2:]
    ungated = ACLEmbedLoss(tiny_model, LABELS, contrastive_weight=0.5, gradient_gating=False)
    ce_only = ACLEmbedLoss(tiny_model, LABELS, mode="ce")
    full_a, _ = _param_grads(tiny_model, ungated, texts_a, y_a)
    full_b, _ = _param_grads(tiny_model, ungated, texts_b, y_b)
    ce_a, _ = _param_grads(tiny_model, ce_only, texts_a, y_a)
    ce_b, _ = _param_grads(tiny_model, ce_only, texts_b, y_b)

    state = GradientState()
    for threshold, expected in ((180.0, (full_a, full_b)), (0.0, (ce_a, ce_b))):
        loss = ACLEmbedLoss(tiny_model, LABELS, contrastive_weight=0.5, angle_threshold=threshold, angle_parameters="all")
        tiny_model.zero_grad(set_to_none=True)
        try:
            for sync, (texts, y) in ((False, (texts_a, y_a)), (True, (texts_b, y_b))):
                state._set_sync_gradients(sync)
                parts = loss(_features(tiny_model, texts), torch.tensor(y))
                torch.stack(list(parts.values())).sum().backward()
        finally:
            state._set_sync_gradients(True)
        assert len(loss.angle_history) == 1  # one decision per optimizer step
        grads = {n: p.grad for n, p in tiny_model.named_parameters() if p.grad is not None}
        _assert_same_grads(grads, {n: expected[0][n] + expected[1][n] for n in expected[0]})


def test_non_finite_per_term_gradient_halves_the_scale(tiny_model):
    loss = ACLEmbedLoss(tiny_model, LABELS)
    loss.grad_scale = 2.0**200  # CE x scale overflows float32
    _param_grads(tiny_model, loss)
    assert loss.grad_scale == 2.0**199


def _ddp_worker(rank: int, world_size: int, init_file: str, results) -> None:
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        torch.manual_seed(rank)
        a, b = [torch.randn(5)], [torch.randn(5)]
        results[rank] = (gradient_angle(a, b)[0], gradient_angle(a, b, reduce_distributed=False)[0], a[0], b[0])
    finally:
        torch.distributed.destroy_process_group()


def test_ddp_ranks_take_the_same_decision(tmp_path):
    import torch.multiprocessing as mp

    manager = mp.Manager()
    results = manager.dict()
    mp.spawn(_ddp_worker, args=(2, str(tmp_path / "init"), results), nprocs=2, join=True)
    (reduced0, local0, a0, b0), (reduced1, local1, a1, b1) = results[0], results[1]
    assert reduced0 == pytest.approx(reduced1, abs=1e-9)
    assert local0 != pytest.approx(local1)
    dot = float(a0 @ b0 + a1 @ b1)
    norms = math.sqrt(float(a0 @ a0 + a1 @ a1)) * math.sqrt(float(b0 @ b0 + b1 @ b1))
    assert reduced0 == pytest.approx(math.degrees(math.acos(dot / norms)), abs=1e-4)


# ----------------------------------------------------------------------------- bad input


def test_bad_input(tiny_model):
    with pytest.raises(ValueError, match="label_names: need at least 2"):
        ACLEmbedLoss(tiny_model, ["only one"])
    loss = ACLEmbedLoss(tiny_model, LABELS)
    with pytest.raises(ValueError, match="label_names"):
        ACLEmbedLoss(tiny_model, LABELS + ["refund"])  # head already has 3 labels
    with pytest.raises(ValueError, match=r"labels: values \[3, 7\] are outside"):
        loss(_features(tiny_model, TEXTS[:3]), torch.tensor([0, 3, 7]))
    with pytest.raises(ValueError, match="labels: .*integer"):
        loss(_features(tiny_model, TEXTS[:2]), torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="mode"):
        ACLEmbedLoss(tiny_model, LABELS, mode="scl")
    with pytest.raises(ValueError, match="angle_threshold"):
        ACLEmbedLoss(tiny_model, LABELS, angle_threshold=200)
    with pytest.raises(ValueError, match="temperature"):
        ACLEmbedLoss(tiny_model, LABELS, temperature=0)
    with pytest.warns(UserWarning, match="single class"):
        loss(_features(tiny_model, TEXTS[:2]), torch.tensor([0, 0]))
    assert loss.single_class_batches == 1


def test_config_and_head_lives_in_the_model(tiny_model):
    loss = ACLEmbedLoss(tiny_model, LABELS, contrastive_weight=0.1)
    assert loss.get_config_dict()["contrastive_weight"] == 0.1
    assert find_label_head(tiny_model) is loss.head
    assert list(loss.parameters()) == list(tiny_model.parameters())  # the loss owns no parameters of its own
    assert attach_label_head(tiny_model, LABELS) is loss.head


# ----------------------------------------------------------------------------- training


def _toy_dataset(n_per_class: int = 16):
    """Three classes, each with its own vocabulary: texts of three words of the class."""
    from datasets import Dataset

    words = {
        0: ["card", "declined", "payment", "pin", "atm", "cash"],
        1: ["top", "balance", "deposit", "cheque", "salary", "wallet"],
        2: ["transfer", "arrived", "sent", "swift", "iban", "recipient"],
    }
    rows = {"text": [], "label": []}
    for label, vocabulary in words.items():
        for i in range(n_per_class):
            rows["text"].append(" ".join(vocabulary[(i + k * (1 + i // 6)) % 6] for k in range(3)))
            rows["label"].append(label)
    return Dataset.from_dict(rows)


def test_short_training_lowers_the_loss_and_saves_the_head(tiny_model, tmp_path):
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.base.sampler import BatchSamplers

    from contrastive_bert.heads.label_embedding import load_model_with_head, predict
    from contrastive_bert.losses.acl_grad import GradientAngleCallback

    dataset = _toy_dataset()
    loss = ACLEmbedLoss(tiny_model, LABELS, contrastive_weight=0.02)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=12,
        num_train_epochs=4,
        learning_rate=2e-3,
        batch_sampler=BatchSamplers.GROUP_BY_LABEL,
        logging_steps=4,
        save_strategy="steps",
        save_steps=8,
        report_to=[],
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    callback = GradientAngleCallback(loss, output_path=tmp_path / "angles.json")
    trainer = SentenceTransformerTrainer(
        model=tiny_model, args=args, train_dataset=dataset, loss=loss, callbacks=[callback]
    )
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert logs[-1]["loss"] < logs[0]["loss"]
    assert all("acl_grad_angle" in entry and "acl_gated_fraction" in entry for entry in logs)
    assert len(loss.angle_history) == trainer.state.global_step
    assert (tmp_path / "angles.json").is_file()
    assert loss.single_class_batches == 0

    tiny_model.save(str(tmp_path / "model"))
    reloaded = load_model_with_head(str(tmp_path / "model"), device="cpu")
    predictions = predict(reloaded, list(dataset["text"]))
    accuracy = sum(LABELS.index(p) == y for p, y in zip(predictions, dataset["label"])) / len(dataset)
    assert accuracy > 0.6

    # resume: the trainer's checkpoint restores the head into a model whose head starts elsewhere
    import copy

    fresh = copy.deepcopy(tiny_model)
    with torch.no_grad():
        find_label_head(fresh).weight.normal_()
    resumed = SentenceTransformerTrainer(model=fresh, args=args, train_dataset=dataset, loss=ACLEmbedLoss(fresh, LABELS))
    resumed._load_from_checkpoint(str(tmp_path / "out" / f"checkpoint-{trainer.state.global_step}"))
    torch.testing.assert_close(find_label_head(fresh).weight, find_label_head(tiny_model).weight)


def test_registry_builds_acl_from_classlabel_names(tiny_model):
    from datasets import ClassLabel, Dataset, Features, Value

    from contrastive_bert.training import losses_registry
    from contrastive_bert.training.losses_registry import get_loss_entry

    features = Features({"text": Value("string"), "label": ClassLabel(names=LABELS)})
    dataset = Dataset.from_dict({"text": TEXTS, "label": Y}, features=features)
    entry = get_loss_entry("acl")
    # batches: every class all epoch long (tests/losses/test_acl_batch_order.py)
    assert entry.data_format == "labelled" and entry.batch_sampler is losses_registry.class_mixed_batches

    class Recipe:
        loss_options = {"contrastive_weight": 0.05, "mode": "supcon"}

    loss = entry.build(tiny_model, dataset, Recipe())
    assert loss.label_names == LABELS and loss.mode == "supcon" and loss.contrastive_weight == 0.05
    with pytest.raises(ValueError, match="train_dataset: column 'label' is not a ClassLabel"):
        entry.build(tiny_model, Dataset.from_dict({"text": TEXTS, "label": Y}), Recipe())


def test_trainer_callbacks_only_with_gating(tiny_model):
    from contrastive_bert.losses.acl_grad import GradientAngleCallback

    callbacks = ACLEmbedLoss(tiny_model, LABELS).trainer_callbacks()
    assert len(callbacks) == 1 and isinstance(callbacks[0], GradientAngleCallback)
    assert ACLEmbedLoss(tiny_model, LABELS, gradient_gating=False).trainer_callbacks() == []
    assert ACLEmbedLoss(tiny_model, LABELS, mode="ce").trainer_callbacks() == []


def test_acl_methods_configure_the_ablation(tiny_model):
    from contrastive_bert.training.acl import ACL_METHODS, acl_loss_for_method

    assert set(ACL_METHODS) == {"ce", "supcon", "acl_embed", "acl_embed_grad"}
    loss = acl_loss_for_method(tiny_model, LABELS, "acl_embed_grad", contrastive_weight=0.1)
    assert (loss.mode, loss.gradient_gating, loss.contrastive_weight) == ("acl", True, 0.1)
    assert acl_loss_for_method(tiny_model, LABELS, "supcon").mode == "supcon"
    with pytest.raises(ValueError, match="method"):
        acl_loss_for_method(tiny_model, LABELS, "scl")


# ----------------------------------------------------------------------------- lambda 0, cheaper ACL-Grad, options


def test_lambda_zero_equals_cross_entropy_exactly(tiny_model):
    import copy

    attach_label_head(tiny_model, LABELS)
    reference = copy.deepcopy(tiny_model)
    start = copy.deepcopy(tiny_model)
    tiny_model.eval()
    reference.eval()
    loss = ACLEmbedLoss(tiny_model, LABELS, contrastive_weight=0.0, gradient_gating=True)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (tiny_model, reference)]
    y = torch.tensor(Y)
    for _ in range(3):
        for model, optimizer in zip((tiny_model, reference), optimizers):
            optimizer.zero_grad()
            if model is tiny_model:
                parts = loss(_features(model), y)
                assert set(parts) == {"ce"}
                value = torch.stack(list(parts.values())).sum()
            else:  # plain cross-entropy on the head's cosine logits
                value = F.cross_entropy(model(_features(model)[0])["logits"].float(), y)
            value.backward()
            optimizer.step()
    for (name, a), (_, b), (_, c) in zip(tiny_model.named_parameters(), reference.named_parameters(), start.named_parameters()):
        assert torch.equal(a, b), name
    assert any(not torch.equal(a, c) for a, c in zip(tiny_model.parameters(), start.parameters()))
    assert loss.angle_history == []


def _hand_angle(model, ce, contrastive, names) -> float:
    """Angle (degrees) between grad(CE) and grad(SupCon) over the named parameters, by hand."""
    params = dict(model.named_parameters())
    chosen = [params[n] for n in names]
    g_ce = torch.autograd.grad(ce, chosen, retain_graph=True, allow_unused=True)
    g_con = torch.autograd.grad(contrastive, chosen, allow_unused=True)
    pairs = [(a.flatten().double(), b.flatten().double()) for a, b in zip(g_ce, g_con) if a is not None and b is not None]
    a, b = torch.cat([x for x, _ in pairs]), torch.cat([y for _, y in pairs])
    return math.degrees(math.acos(float(a @ b) / math.sqrt(float(a @ a) * float(b @ b))))


@pytest.mark.parametrize("scope", ["all", "head_last_layer"])
def test_estimated_gating_decides_on_the_hand_computed_angle(tiny_model, scope):
    tiny_model.eval()
    weight = 0.5
    loss = ACLEmbedLoss(tiny_model, LABELS, contrastive_weight=weight, angle_parameters=scope, angle_every=2)
    names = [n for n, p in tiny_model.named_parameters() if p.requires_grad]
    if scope == "head_last_layer":  # the tiny BERT has layers 0 and 1; the head is module 2
        names = [n for n in names if not n.startswith("0.") or ".layer.1." in n]
        assert any(n.startswith("2.") for n in names) and len(names) < len(list(tiny_model.parameters()))
    expected = _hand_angle(tiny_model, *loss.compute_terms(_features(tiny_model), torch.tensor(Y)), names)
    grads_full, _ = _param_grads(tiny_model, ACLEmbedLoss(tiny_model, LABELS, contrastive_weight=weight, gradient_gating=False))
    grads_ce, _ = _param_grads(tiny_model, ACLEmbedLoss(tiny_model, LABELS, mode="ce"))

    loss.angle_threshold = expected + 0.01  # kept
    grads, parts = _param_grads(tiny_model, loss)
    assert loss.angle_history[-1]["angle"] == pytest.approx(expected, abs=1e-3)
    assert not loss.angle_history[-1]["gated"] and loss.angle_history[-1]["estimate"] == scope
    _assert_same_grads(grads, grads_full)
    assert parts["contrastive"].item() > 0

    loss.angle_threshold = expected - 0.01  # angle_every=2: the second step keeps the first decision
    grads, _ = _param_grads(tiny_model, loss)
    assert len(loss.angle_history) == 1
    _assert_same_grads(grads, grads_full)

    grads, parts = _param_grads(tiny_model, loss)  # third step decides again: gated, CE's gradient exactly
    assert len(loss.angle_history) == 2 and loss.angle_history[-1]["gated"]
    _assert_same_grads(grads, grads_ce)
    assert parts["contrastive"].item() > 0  # the logged value is still lambda x SupCon


def test_audit_records_the_exact_angle_next_to_the_cheap_one(tiny_model):
    tiny_model.eval()
    exact = ACLEmbedLoss(tiny_model, LABELS, contrastive_weight=0.5, angle_parameters="all")
    _param_grads(tiny_model, exact)
    exact_angle = exact.angle_history[-1]["angle"]
    cheap = ACLEmbedLoss(tiny_model, LABELS, contrastive_weight=0.5, angle_parameters="head_last_layer",
                         angle_audit_every=2, angle_threshold=exact_angle + 0.01)
    for _ in range(3):
        _param_grads(tiny_model, cheap)
    audited = [e for e in cheap.angle_history if "exact_angle" in e]
    assert [e["step"] for e in audited] == [0, 2]
    assert audited[0]["exact_angle"] == pytest.approx(exact_angle, abs=1e-4) and audited[0]["exact_gated"] is False
    assert cheap.angle_history[0]["angle"] != pytest.approx(exact_angle, abs=1e-3)  # a different estimate
    assert cheap.audit_seconds > 0


def test_check_options_without_a_model():
    from contrastive_bert.training.losses_registry import get_loss_entry

    ACLEmbedLoss.check_options({"temperature": 0.1, "label_embedding": "encoded", "angle_every": 5, "label_template": "about {}"})
    bad = [
        ({"temperature": 0}, "temperature"),
        ({"contrastive_weight": -1}, "contrastive_weight"),
        ({"label_embedding": "learned"}, "label_embedding"),
        ({"label_template": "no slot"}, "label_template"),
        ({"angle_parameters": "last"}, "angle_parameters"),
        ({"angle_every": 0}, "angle_every"),
        ({"angle_audit_every": -1}, "angle_audit_every"),
        ({"gradient_gating": "yes"}, "gradient_gating"),
        ({"angle_threshold": 181}, "angle_threshold"),
    ]
    for options, name in bad:
        with pytest.raises(ValueError, match=rf"loss_options\.{name}:"):
            ACLEmbedLoss.check_options(options)
        with pytest.raises(ValueError, match=rf"loss_options\.{name}:"):
            get_loss_entry("acl").check_options(options)
    with pytest.raises(ValueError, match=r"loss_options\.angle_everyy: unknown"):
        get_loss_entry("acl").check_options({"angle_everyy": 2})


# ----------------------------------------------------------------------------- encoded label embeddings


def test_encoded_labels_are_the_encoder_embeddings_of_the_names_with_graph(tiny_model):
    from contrastive_bert.heads.encoded_label import EncodedLabelClassifier, encode_label_texts

    tiny_model.eval()
    loss = ACLEmbedLoss(tiny_model, LABELS, label_embedding="encoded", label_template="about {}",
                        contrastive_weight=0.5, gradient_gating=False)
    assert isinstance(loss.head, EncodedLabelClassifier) and list(loss.head.parameters()) == []
    y = torch.tensor(Y)
    ce, contrastive = loss.compute_terms(_features(tiny_model), y)
    h = tiny_model(_features(tiny_model)[0])["sentence_embedding"]
    rows = encode_label_texts(tiny_model, [f"about {name}" for name in LABELS])
    expected_ce = F.cross_entropy(20.0 * F.normalize(h, dim=-1) @ F.normalize(rows, dim=-1).T, y)
    assert ce.item() == pytest.approx(expected_ce.item(), rel=1e-5)
    expected_con = _reference_supcon(torch.cat([h, rows]).detach(), Y + [0, 1, 2], 0.5)
    assert contrastive.item() == pytest.approx(expected_con, rel=1e-5)
    # the label rows carry gradient into the encoder: CE's gradient differs from CE on detached rows
    params = [p for p in tiny_model.parameters() if p.requires_grad]
    with_rows = torch.autograd.grad(ce, params, allow_unused=True)
    detached = F.cross_entropy(20.0 * F.normalize(h, dim=-1) @ F.normalize(rows.detach(), dim=-1).T, y)
    without_rows = torch.autograd.grad(detached, params, allow_unused=True)
    assert any(a is not None and not torch.allclose(a, b) for a, b in zip(with_rows, without_rows))
    torch.testing.assert_close(loss.head.weight, rows.detach())  # the stored rows follow the encoder


def test_encoded_head_training_then_a_new_label_by_name(tiny_model, tmp_path):
    from contrastive_bert.heads.encoded_label import EncodedLabelClassifier
    from contrastive_bert.heads.label_embedding import add_labels_from_names, load_model_with_head, predict
    from contrastive_bert.training.acl import train_label_classifier
    from contrastive_bert.training.recipe import TrainingRecipe

    dataset = _toy_dataset()
    recipe = TrainingRecipe(datasets=["toy"], epochs=4, batch_size=12, learning_rate=2e-3, seed=0, max_seq_length=16,
                            logging_steps=2, save_steps=10**6, eval_steps=10**6, dev_task=None, eval_tasks=[])
    trainer, loss = train_label_classifier(tiny_model, dataset, LABELS, "acl_embed", recipe, str(tmp_path / "out"),
                                           label_embedding="encoded", label_template="{}", label_refresh_every=3,
                                           contrastive_weight=0.1)
    logs = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert logs[-1] < logs[0]
    head = loss.head
    # at the end of training the rows are the trained encoder's embeddings of the names
    assert torch.equal(head.weight, tiny_model.encode(LABELS, convert_to_tensor=True))
    accuracy = sum(LABELS.index(p) == y for p, y in zip(predict(tiny_model, list(dataset["text"])), dataset["label"])) / len(dataset)
    assert accuracy > 0.6
    tiny_model.save(str(tmp_path / "model"))
    reloaded = load_model_with_head(str(tmp_path / "model"), device="cpu")
    assert isinstance(find_label_head(reloaded), EncodedLabelClassifier)
    add_labels_from_names(reloaded, ["iban swift"])
    new_head = find_label_head(reloaded)
    assert torch.equal(new_head.weight[3:], reloaded.encode(["iban swift"], convert_to_tensor=True))
    assert predict(reloaded, ["iban swift"]) == ["iban swift"]
