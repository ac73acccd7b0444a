"""The retrieval recipes train what eval/bench_retrieval.py chose on SciFact's dev split (the best
method on dev, sentence-transformers' or ours, at its dev-chosen configuration): no losing method is
a recipe. NFCorpus follows SciFact's choice until its own protocol is measured."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
RESULTS = json.loads((ROOT / "eval" / "results" / "retrieval_quality.json").read_text())
PROTOCOL_KEYS = ("learning_rate", "miner")  # the configuration's fields that are not loss options


def best_on_dev(setting: str = "scifact") -> tuple[str, dict]:
    methods = RESULTS[setting]["methods"]
    name = max(methods, key=lambda m: methods[m]["dev"]["ndcg_at_10"] if methods[m]["dev"] else -math.inf)
    return name, methods[name]


@pytest.mark.parametrize("recipe", ["scifact_best.yaml", "nfcorpus_best.yaml"])
def test_recipe_trains_the_method_chosen_on_dev(recipe):
    values = yaml.safe_load((ROOT / "scripts" / "recipes" / recipe).read_text())
    name, method = best_on_dev()
    assert method["rows"] == "corpus_mined", f"{name}: a recipe cannot express {method['rows']!r} rows yet; add it"
    assert values["loss"] == method["loss"]
    assert values["loss_options"] == {k: v for k, v in method["options"].items() if k not in PROTOCOL_KEYS}
    assert values["learning_rate"] == pytest.approx(method["options"]["learning_rate"])
    assert values["epochs"] == method["epochs"] and values["batch_size"] == method["batch_size"]
    negatives = values["corpus_negatives"]
    assert {k: negatives.get(k) for k in ("num_negatives", "range_max", "perc_pos")} == {"num_negatives": 1, "range_max": 100, "perc_pos": 0.95}
    assert bool(negatives.get("refresh_every_epochs")) == ("ance" in name), f"{name}: refresh {'on' if 'ance' in name else 'off'}"
