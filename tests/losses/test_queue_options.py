"""Option checks of the queue losses without a model (``check_options``, as the registry calls
them before any model loads) and the registered loss names."""

from __future__ import annotations

import pytest

from contrastive_bert.losses.cached_queue_infonce import CachedQueueInfoNCELoss
from contrastive_bert.losses.queue_infonce import QueueInfoNCELoss
from contrastive_bert.training import get_loss_entry

BAD = [
    ({"temperature": 0}, "loss_options.temperature: expected a positive number, got 0"),
    ({"temperature": -1.0}, "loss_options.temperature: expected a positive number"),
    ({"temperature": "0.05"}, "loss_options.temperature: expected a positive number"),
    ({"queue_size": 0}, "loss_options.queue_size: expected a positive integer or null, got 0"),
    ({"queue_size": 2.5}, "loss_options.queue_size: expected a positive integer"),
    ({"num_hard_negatives": -1}, "loss_options.num_hard_negatives: expected an integer >= 0"),
    ({"queue_size": 4, "num_hard_negatives": 5}, r"loss_options.num_hard_negatives: expected at most queue_size \(4\), got 5"),
    ({"hard_negative_share": 1.0}, r"loss_options.hard_negative_share: expected a number in \(0, 1\)"),
    ({"hard_negative_share": -0.1}, "loss_options.hard_negative_share"),
    ({"momentum": 1.0}, r"loss_options.momentum: expected a number in \[0, 1\)"),
    ({"relative_margin": 2}, r"loss_options.relative_margin: expected a number in \[0, 1\]"),
    ({"perc_pos": 0}, r"loss_options.perc_pos: expected a number in \(0, 1\]"),
    ({"perc_pos": 1.2}, "loss_options.perc_pos"),
    ({"absolute_margin": float("nan")}, "loss_options.absolute_margin: expected a finite number"),
    ({"guide_margin": None}, "loss_options.guide_margin: expected a finite number"),
    ({"guide_model": 3}, "loss_options.guide_model: expected a model name or path"),
    ({"symmetric": "yes"}, "loss_options.symmetric: expected true or false"),
    ({"mining_backend": "annoy"}, "loss_options.mining_backend: expected one of 'auto', 'faiss', 'torch'"),
    ({"hardness_schedule": {"start": 2.0}}, r"loss_options.hardness_schedule: start: expected a hardness in \[0, 1\]"),
    ({"hardness_schedule": {"speed": 1}}, "loss_options.hardness_schedule: .*speed"),
    ({"temprature": 0.1}, r"loss_options.temprature: unknown option of QueueInfoNCELoss \(did you mean 'temperature'\?\)"),
]


@pytest.mark.parametrize(("options", "message"), BAD)
def test_queue_infonce_check_options(options, message):
    with pytest.raises(ValueError, match=message):
        QueueInfoNCELoss.check_options(options)
    with pytest.raises(ValueError, match=message):
        CachedQueueInfoNCELoss.check_options({"mini_batch_size": 8, **options})


@pytest.mark.parametrize(("options", "message"), BAD[:3])
def test_constructor_uses_the_same_check(tiny_model, options, message):
    with pytest.raises(ValueError, match=message):
        QueueInfoNCELoss(tiny_model, **options)


def test_good_options_pass():
    good = {"temperature": 0.02, "queue_size": 4096, "num_hard_negatives": 8, "hard_negative_share": 0.15,
            "perc_pos": 0.95, "guide_model": "default", "guide_margin": 0.0, "momentum": 0.999,
            "hardness_schedule": {"start": 0.0, "warmup_steps": 100}}
    QueueInfoNCELoss.check_options(good)
    CachedQueueInfoNCELoss.check_options({**good, "mini_batch_size": 16})


@pytest.mark.parametrize(("options", "message"), [
    ({"mini_batch_size": 0}, "loss_options.mini_batch_size: expected a positive integer, got 0"),
    ({"mini_batch_num_tokens": -5}, "loss_options.mini_batch_num_tokens: expected a positive integer or null"),
])
def test_cached_check_options(options, message):
    with pytest.raises(ValueError, match=message):
        CachedQueueInfoNCELoss.check_options(options)


@pytest.mark.parametrize(("name", "options", "message"), [
    ("queue_infonce", {"cached": True}, "loss_options.cached: unknown option of loss 'queue_infonce'"),  # the loss is cached_queue_infonce
    ("queue_infonce", {"mini_batch_size": 4}, "loss_options.mini_batch_size: unknown option of loss 'queue_infonce'"),
    ("queue_infonce", {"tempreature": 1}, "loss_options.tempreature: unknown option"),
    ("cached_queue_infonce", {"mini_batch_size": 0}, "loss_options.mini_batch_size"),
    ("cached_queue_infonce", {"perc_pos": 2}, "loss_options.perc_pos"),
    ("cached_queue_infonce", {"mini_bach_size": 2}, "loss_options.mini_bach_size: unknown option"),
    ("queue_cosent", {"score_term": "dot"}, "loss_options.score_term"),
    ("queue_cosent", {"guide_margin": float("inf")}, "loss_options.guide_margin"),
])
def test_registry_checks_without_a_model(name, options, message):
    with pytest.raises(ValueError, match=message):
        get_loss_entry(name).check_options(options)


def test_registered_names_build(tiny_model):
    from datasets import Dataset

    from contrastive_bert.training import TrainingRecipe

    pairs = Dataset.from_dict({"anchor": [f"a{i}" for i in range(40)], "positive": [f"p{i}" for i in range(40)]})
    recipe = TrainingRecipe(loss="cached_queue_infonce", loss_options={"mini_batch_size": 4, "guide_model": tiny_model},
                            batch_size=8)
    cached = get_loss_entry("cached_queue_infonce").build(tiny_model, pairs, recipe)
    assert isinstance(cached, CachedQueueInfoNCELoss) and cached.queue_size == 20 and cached.loss.guide is not None
    plain = TrainingRecipe(loss="queue_infonce", loss_options={"perc_pos": 0.95}, batch_size=8)
    built = get_loss_entry("queue_infonce").build(tiny_model, pairs, plain)
    assert type(built) is QueueInfoNCELoss and built.miner.filters.margins.perc_pos == 0.95
