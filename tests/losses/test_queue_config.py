"""The queue losses' options as config objects: grouped by concern, checked once (on creation),
the flat keyword constructor and ``config=`` equal, the config dict derived from them, and one
step hook shared by the plain and the cached loss."""

from __future__ import annotations

import copy
import dataclasses
import inspect

import pytest
import torch

from contrastive_bert.losses.cached_queue_infonce import CachedQueueInfoNCELoss, GradCacheConfig
from contrastive_bert.losses.false_negative_filters import FalseNegativeFilters
from contrastive_bert.losses.guide_filter import GuideConfig
from contrastive_bert.losses.hard_negative_miner import MiningConfig
from contrastive_bert.losses.queue_config import InfoNCEConfig, QueueConfig, QueueInfoNCEConfig
from contrastive_bert.losses.queue_cosent import QueueCoSENTLoss, ScoreTermConfig
from contrastive_bert.losses.queue_infonce import QueueInfoNCELoss
from contrastive_bert.topk_search import HardnessSchedule, ScoreMargins

OPTIONS = {"queue_size": 16, "temperature": 0.1, "num_hard_negatives": 2, "hard_negative_share": 0.2,
           "perc_pos": 0.95, "filter_same_anchor": False, "momentum": 0.9,
           "hardness_schedule": {"start": 0.5, "warmup_steps": 10}}


def test_flat_options_go_to_their_group():
    config = QueueInfoNCEConfig.from_options(OPTIONS)
    assert config.infonce == InfoNCEConfig(temperature=0.1, hard_negative_share=0.2)
    assert config.queue == QueueConfig(queue_size=16, momentum=0.9)
    assert config.mining == MiningConfig(num_hard_negatives=2, hardness_schedule=HardnessSchedule(start=0.5, warmup_steps=10))
    assert config.filters == FalseNegativeFilters(perc_pos=0.95, filter_same_anchor=False)
    assert config.guide == GuideConfig()
    names = [f.name for group in (InfoNCEConfig, QueueConfig, MiningConfig, FalseNegativeFilters, GuideConfig)
             for f in dataclasses.fields(group)]
    assert len(names) == len(set(names)) == len(QueueInfoNCELoss.option_names())  # one meaning per name
    assert set(QueueInfoNCELoss.option_names()) == set(names)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.infonce.temperature = 1.0


def test_the_defaults_are_the_config_defaults(tiny_model):
    """The constructor has no defaults of its own: an empty call is the default config."""
    loss = QueueInfoNCELoss(tiny_model)
    assert loss.config == QueueInfoNCEConfig()
    assert (loss.temperature, loss.scale, loss.queue_size) == (0.05, 20.0, None)
    assert (loss.miner.filters.relative_margin, loss.miner.filters.filter_queue_negatives) == (0.05, True)
    assert loss.miner.filters is loss.config.filters and loss.miner.mining is loss.config.mining
    assert loss.guide is None and loss.momentum_encoder is None and loss.queue is None


def test_config_and_keywords_build_the_same_loss(tiny_model):
    by_name = QueueInfoNCELoss(tiny_model, **OPTIONS)
    by_config = QueueInfoNCELoss(tiny_model, config=QueueInfoNCEConfig.from_options(OPTIONS))
    assert by_name.config == by_config.config
    assert by_name.get_config_dict() == by_config.get_config_dict()
    with pytest.raises(ValueError, match=r"config: give a QueueInfoNCEConfig or options by name, not both"):
        QueueInfoNCELoss(tiny_model, config=QueueInfoNCEConfig(), temperature=0.1)
    with pytest.raises(ValueError, match="loss_options.train_dataset_size: expected a positive integer"):
        QueueInfoNCELoss(tiny_model, train_dataset_size=0)


def test_config_dict_is_derived_from_the_config(tiny_model):
    loss = QueueInfoNCELoss(tiny_model, **OPTIONS)
    config = loss.get_config_dict()
    assert set(config) == set(QueueInfoNCELoss.option_names())
    assert config["hardness_schedule"] == {"start": 0.5, "end": 1.0, "warmup_steps": 10, "pool_factor": 4}
    assert config["queue_size"] == 16 and config["temperature"] == 0.1 and config["perc_pos"] == 0.95
    lazy = QueueInfoNCELoss(tiny_model, guide_model=copy.deepcopy(tiny_model))
    assert lazy.get_config_dict()["queue_size"] is None
    assert lazy.get_config_dict()["guide_model"] == "SentenceTransformer"  # a model object: its class name
    cached = CachedQueueInfoNCELoss(tiny_model, mini_batch_size=4, **OPTIONS).get_config_dict()
    assert cached == {**config, "mini_batch_size": 4, "mini_batch_num_tokens": None, "show_progress_bar": False}
    cosent = QueueCoSENTLoss(tiny_model, infonce_weight=10, **OPTIONS).get_config_dict()
    assert cosent == {**dataclasses.asdict(ScoreTermConfig(infonce_weight=10.0)), **config}


@pytest.mark.parametrize(("config_class", "options", "message"), [
    (InfoNCEConfig, {"temperature": 0}, "loss_options.temperature: expected a positive number, got 0"),
    (QueueConfig, {"queue_size": 0}, "loss_options.queue_size: expected a positive integer or null, got 0"),
    (MiningConfig, {"mining_index": "lsh"}, "loss_options.mining_index: expected one of 'flat', 'ivf', 'hnsw'"),
    (FalseNegativeFilters, {"perc_pos": 0}, r"loss_options.perc_pos: expected a number in \(0, 1\]"),
    (GuideConfig, {"guide_margin": float("inf")}, "loss_options.guide_margin: expected a finite number"),
    (GradCacheConfig, {"mini_batch_size": 0}, "loss_options.mini_batch_size: expected a positive integer, got 0"),
    (ScoreTermConfig, {"score_term": "dot"}, "loss_options.score_term: expected one of"),
])
def test_each_group_checks_its_own_values(config_class, options, message):
    with pytest.raises(ValueError, match=message):
        config_class(**options)


def test_one_check_per_option(monkeypatch, tiny_model):
    """Building a loss runs each group's check exactly once (the registry's check without a
    model makes the same config, nothing more)."""
    calls = []
    for group in (InfoNCEConfig, QueueConfig, MiningConfig, FalseNegativeFilters, GuideConfig):
        original = group.__post_init__
        monkeypatch.setattr(group, "__post_init__", lambda self, _o=original: (calls.append(type(self).__name__), _o(self))[1])
    QueueInfoNCELoss(tiny_model, **OPTIONS)
    assert sorted(calls) == sorted(["InfoNCEConfig", "QueueConfig", "MiningConfig", "FalseNegativeFilters", "GuideConfig"])
    calls.clear()
    CachedQueueInfoNCELoss(tiny_model, mini_batch_size=4, **OPTIONS)
    assert len(calls) == 5


def test_the_constructors_take_no_option_keywords_of_their_own():
    """The option defaults live in the config classes only (no second copy in a signature)."""
    parameters = inspect.signature(QueueInfoNCELoss.__init__).parameters
    assert [name for name in parameters if name not in ("self", "model", "options")] == ["config", "train_dataset_size"]


def test_plain_and_cached_share_the_step_hooks(monkeypatch, tiny_model):
    """Both losses run QueueInfoNCELoss.start_step (ids, guide, momentum update) and end_step
    (enqueue) once per call."""
    steps = []
    for hook in ("start_step", "end_step"):
        original = getattr(QueueInfoNCELoss, hook)

        def counting(self, *args, _original=original, _hook=hook, **kwargs):
            steps.append(_hook)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(QueueInfoNCELoss, hook, counting)
    features = [tiny_model.preprocess(["a cat", "a dog", "the sky"]), tiny_model.preprocess(["kitten", "puppy", "blue"])]
    for loss in (QueueInfoNCELoss(tiny_model, queue_size=8, momentum=0.5),
                 CachedQueueInfoNCELoss(tiny_model, mini_batch_size=2, queue_size=8, momentum=0.5)):
        tiny_model.train()
        parts = loss(features, None)
        sum(parts.values()).backward()
        inner = getattr(loss, "loss", loss)
        assert int(inner.num_steps) == 1 and inner.queue.filled()[0].shape[0] == 3
    assert steps == ["start_step", "end_step", "start_step", "end_step"]
    with torch.no_grad():
        eval_loss = QueueInfoNCELoss(tiny_model, queue_size=8)
        eval_loss(features, None)
    assert int(eval_loss.num_steps) == 0  # no gradient: nothing enqueued


def test_the_margins_are_checked_when_the_config_is_made_not_per_step(monkeypatch, tiny_model):
    """The miner applies the filters' ScoreMargins made with the config; a step makes none."""
    loss = QueueInfoNCELoss(tiny_model, queue_size=8, num_hard_negatives=2, perc_pos=0.95)
    assert loss.miner.filters.margins == ScoreMargins(relative_margin=0.05, perc_pos=0.95)
    checks = []
    original = ScoreMargins.__post_init__
    monkeypatch.setattr(ScoreMargins, "__post_init__", lambda self: (checks.append(1), original(self))[1])
    features = [tiny_model.preprocess(["a cat", "a dog", "the sky"]), tiny_model.preprocess(["kitten", "puppy", "blue"])]
    tiny_model.train()
    for _ in range(2):  # the second call mines from the 3 rows the first one enqueued
        sum(loss(features, None).values()).backward()
    assert len(loss.queue) == 6 and checks == []
