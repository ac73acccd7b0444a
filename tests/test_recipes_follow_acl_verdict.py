"""The bundled classification recipes train with the method and configuration that
eval/bench_acl.py chose on dev for their data set (full training data), as README's verdict says."""

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


@pytest.mark.parametrize(("recipe", "stage", "dataset"), RECIPES)
def test_recipe_uses_the_method_chosen_on_dev(recipe, stage, dataset):
    values = yaml.safe_load((ROOT / "scripts" / "recipes" / recipe).read_text())
    trains = values if stage is None else {**values, **values["stages"][stage]}
    verdict = RESULTS["comparisons"][f"{dataset}/full"]
    assert not verdict["pending"], f"{dataset} full: the verdict is still pending: {verdict['pending']}"
    method = verdict["best_on_dev"]
    chosen = RESULTS["settings"][f"{dataset}/full"][method]["chosen_on_dev"]["options"]
    options = {"mode": "acl", "label_embedding": "free", **trains.get("loss_options", {})}
    assert trains["loss"] == "acl"
    assert {k: options.get(k) for k in METHOD_OPTIONS[method]} == METHOD_OPTIONS[method]
    assert trains["learning_rate"] == pytest.approx(chosen["learning_rate"])
    if method != "ce":
        assert options["contrastive_weight"] == pytest.approx(chosen["contrastive_weight"])
        assert options["temperature"] == pytest.approx(chosen["temperature"])
    if method == "acl_embed_encoded":
        assert options.get("label_template", "{}") == "{}"  # the benchmark encoded the bare names
