"""The bundled classification recipes train with the method and configuration that
eval/bench_acl.py chose on dev for their data set (all of its training data: emotion's 16,000 rows once
that verdict is complete), as README's verdict says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
RESULTS = json.loads((ROOT / "eval" / "results" / "acl_quality.json").read_text())
# bench method -> the loss options that make the package's "acl" loss that method
METHOD_OPTIONS = {
    "ce": {"mode": "ce"},
    "supcon": {"mode": "supcon", "label_embedding": "free"},
    "acl_embed": {"mode": "acl", "label_embedding": "free"},
    "acl_embed_encoded": {"mode": "acl", "label_embedding": "encoded"},
}
# recipe, the stage that trains the classifier, the data set whose verdict it follows
RECIPES = [("emotion_acl.yaml", None, "emotion"), ("emotion_multi_exit.yaml", 0, "emotion"), ("banking77_acl.yaml", None, "banking77"),
           ("banking77_multi_exit.yaml", 0, "banking77")]


def followed_setting(dataset: str) -> str:
    """The verdict a data set's recipes follow: emotion's on all 16,000 training rows (``full16k``) once its
    picked rows have every seed, before that the 3,000-row sample's (``full``); the others' ``full``."""
    full_data = RESULTS["comparisons"].get(f"{dataset}/full16k") or {}
    return f"{dataset}/full16k" if full_data.get("best_on_dev") and not full_data.get("pending") else f"{dataset}/full"


@pytest.mark.parametrize(("recipe", "stage", "dataset"), RECIPES)
def test_recipe_uses_the_method_chosen_on_dev(recipe, stage, dataset):
    values = yaml.safe_load((ROOT / "scripts" / "recipes" / recipe).read_text())
    trains = values if stage is None else {**values, **values["stages"][stage]}
    setting = followed_setting(dataset)
    verdict = RESULTS["comparisons"][setting]
    assert not verdict["pending"], f"{setting}: the verdict is still pending: {verdict['pending']}"
    method = verdict["best_on_dev"]
    chosen = RESULTS["settings"][setting][method]["chosen_on_dev"]["options"]
    options = {"mode": "acl", "label_embedding": "free", **trains.get("loss_options", {})}
    assert trains["loss"] == "acl"
    assert {k: options.get(k) for k in METHOD_OPTIONS[method]} == METHOD_OPTIONS[method]
    assert trains["learning_rate"] == pytest.approx(chosen["learning_rate"])
    if "head_learning_rate" in chosen:  # full16k chose it with the encoder's rate (a free or CE head)
        assert trains["head_learning_rate"] == pytest.approx(chosen["head_learning_rate"])
    if method != "ce":
        assert options["contrastive_weight"] == pytest.approx(chosen["contrastive_weight"])
        assert options["temperature"] == pytest.approx(chosen["temperature"])
    if method == "acl_embed_encoded":
        assert options.get("label_template", "{}") == "{}"  # the benchmark encoded the bare names


def test_emotion_follows_the_full_data_verdict_once_it_is_complete(monkeypatch):
    comparisons = {"emotion/full": {"best_on_dev": "acl_embed_encoded", "pending": {}},
                   "emotion/full16k": {"best_on_dev": "acl_embed_encoded", "pending": {"ce": "1 of 3 seeds"}}}
    monkeypatch.setitem(RESULTS, "comparisons", comparisons)
    assert followed_setting("emotion") == "emotion/full"  # seeds still running
    comparisons["emotion/full16k"]["pending"] = {}
    assert followed_setting("emotion") == "emotion/full16k" and followed_setting("banking77") == "banking77/full"
