"""The ACL benchmarks and ``training.acl`` build their loss through the loss registry's ``acl``
entry, and it is the same loss the direct ``ACLEmbedLoss(...)`` construction gave before: same
options, same head, same loss values on a batch."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from bench_modules import load_bench
from contrastive_bert.heads.label_embedding import find_label_head
from contrastive_bert.losses.acl_embed import ACLEmbedLoss
from contrastive_bert.training.acl import ACL_METHODS, acl_loss_for_method

ROOT = Path(__file__).resolve().parents[2]
LABELS = ["card", "top up", "transfer"]
TEXTS = ["my card was declined", "the card failed again", "how do I top up", "top up by transfer", "my transfer is late",
         "where is my money"]
Y = torch.tensor([0, 0, 1, 1, 2, 2])
ATTRIBUTES = ("label_names", "temperature", "contrastive_weight", "gradient_gating", "angle_threshold", "mode",
              "label_embedding", "label_template", "label_refresh_every", "angle_parameters", "angle_every",
              "angle_audit_every", "grad_scale")


def _bench_acl():
    return load_bench("bench_acl", "bench_acl_loss_options")


def _bench_option_sets() -> list[tuple[str, dict]]:
    """(package method, loss options) exactly as the three ACL benchmarks pass them."""
    bench = _bench_acl()
    sets = []
    for method in bench.TRAINED_METHODS:  # bench_acl.py: each trained method at a (lambda, tau) of its grid
        spec = {"dataset": "banking77", "regime": "full", "method": method, "seed": 0, "learning_rate": 1e-4,
                "contrastive_weight": 0.5, "temperature": 0.1}
        sets.append((bench.ENCODED_LABELS.get(method, method), bench.loss_options(spec)))
    template = "This text is about {}."  # bench_zero_shot.py
    sets += [("ce", {"label_embedding": "free", "label_template": template}),
             ("acl_embed", {"label_embedding": "encoded", "label_template": template, "contrastive_weight": 0.5,
                            "temperature": 0.1})]
    sets += [(m, {"gradient_gating": True, "angle_threshold": 180.0}) for m in ("supcon", "acl_embed")]  # gradient scale
    return sets


def _direct(model, method: str, options: dict) -> ACLEmbedLoss:
    """The construction the benchmarks used before (training/acl.py called the class itself)."""
    return ACLEmbedLoss(model, list(LABELS), **{**ACL_METHODS[method], **options})


@pytest.mark.parametrize("index", range(9))
def test_registry_builds_the_same_acl_loss_as_the_direct_construction(tiny_model, index):
    method, options = _bench_option_sets()[index]
    before_model, after_model = copy.deepcopy(tiny_model), copy.deepcopy(tiny_model)
    torch.manual_seed(0)
    before = _direct(before_model, method, options)
    torch.manual_seed(0)
    after = acl_loss_for_method(after_model, LABELS, method, **options)
    assert type(after) is ACLEmbedLoss
    for name in ATTRIBUTES:
        assert getattr(after, name) == getattr(before, name), name
    head_before, head_after = find_label_head(before_model), find_label_head(after_model)
    assert type(head_after) is type(head_before)
    torch.testing.assert_close(head_after.weight, head_before.weight, rtol=0, atol=0)
    values = []
    for model, loss in ((before_model, before), (after_model, after)):
        torch.manual_seed(1)
        parts = loss([model.preprocess(TEXTS)], Y)
        values.append({k: float(v.detach()) for k, v in parts.items()})
    assert values[0] == values[1]


def test_every_bench_option_set_is_covered():
    assert len(_bench_option_sets()) == 9


def test_the_registry_checks_the_options_of_a_method(tiny_model):
    with pytest.raises(ValueError, match="loss_options.temprature"):
        acl_loss_for_method(tiny_model, LABELS, "acl_embed", temprature=0.1)
    with pytest.raises(ValueError, match="method"):
        acl_loss_for_method(tiny_model, LABELS, "scl")


def test_no_acl_loss_is_built_outside_the_registry():
    """eval/ and the package's training code build ACL only through ``build_loss("acl")``."""
    offenders = []
    for path in [*(ROOT / "eval").glob("*.py"), *(ROOT / "contrastive_bert" / "training").glob("*.py")]:
        text = path.read_text(encoding="utf-8")
        if "ACLEmbedLoss(" in text.replace("ACLEmbedLoss(label_embedding", ""):
            offenders.append(path.name)
    assert not offenders
