"""Training recipes (fields, files, validation), the loss registry, training-data formats,
the output-directory policy and the no-model checks of ``check_recipe``."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml
from torch import nn

from contrastive_bert.training import LOSSES, LossEntry, TrainingRecipe, check_recipe, get_loss_entry, register_loss
from contrastive_bert.training.output_dir import clear_run, prepare_output_dir, write_json
from contrastive_bert.training.runner import training_arguments
from contrastive_bert.training.train_data import build_train_dataset, check_train_datasets

# --------------------------------------------------------------------------- recipe fields


def test_defaults_are_valid():
    recipe = TrainingRecipe()
    assert recipe.model == "default"
    assert recipe.datasets == ["stsb"] and recipe.loss == "mnrl"
    assert set(recipe.to_dict()) == set(TrainingRecipe.field_names())


def test_comma_separated_lists():
    recipe = TrainingRecipe(datasets="stsb, mrpc", eval_tasks="stsb,banking77,")
    assert recipe.datasets == ["stsb", "mrpc"]
    assert recipe.eval_tasks == ["stsb", "banking77"]


def test_unknown_field_with_suggestion():
    with pytest.raises(ValueError, match=r"recipe: unknown field 'learning_rat' \(did you mean 'learning_rate'\?\)"):
        TrainingRecipe.from_dict({"learning_rat": 1e-4})
    with pytest.raises(ValueError, match=r"recipe: unknown field 'zzz'; fields are model, datasets"):
        TrainingRecipe.from_dict({"zzz": 1})


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("batch_size", 0, "batch_size: expected a positive integer, got 0"),
        ("batch_size", 2.5, "batch_size: expected a positive integer, got 2.5"),
        ("batch_size", True, "batch_size: expected a positive integer, got True"),
        ("eval_steps", -1, "eval_steps: expected a positive integer"),
        ("save_steps", 0, "save_steps: expected a positive integer"),
        ("gradient_accumulation_steps", 0, "gradient_accumulation_steps: expected a positive integer"),
        ("max_steps", 0, r"max_steps: expected a positive integer or -1 \(use epochs\), got 0"),
        ("max_steps", -2, "max_steps: expected a positive integer or -1"),
        ("epochs", 0, "epochs: expected a positive number, got 0"),
        ("epochs", "many", "epochs: expected a number, got 'many'"),
        ("learning_rate", -1e-5, "learning_rate: expected a positive number"),
        ("learning_rate", "fast", "learning_rate: expected a number, got 'fast'"),
        ("warmup_ratio", 1.0, r"warmup_ratio: expected a value in \[0, 1\), got 1.0"),
        ("min_pair_score", 4.0, r"min_pair_score: expected a value in \[0, 1\], got 4.0"),
        ("max_seq_length", 1, "max_seq_length: expected at least 2 tokens, got 1"),
        ("max_train_samples", 0, "max_train_samples: expected a positive integer, got 0"),
        ("freeze_layers", -1, "freeze_layers: expected a non-negative number of layers"),
        ("max_grad_norm", -1.0, "max_grad_norm: expected a non-negative number"),
        ("mixed_precision", "fp8", r"mixed_precision: expected one of \('no', 'fp16', 'bf16', 'auto'\), got 'fp8'"),
        ("datasets", "", "datasets: expected at least one training data set"),
        ("datasets", [], "datasets: expected at least one training data set"),
        ("loss_options", ["scale", 20], "loss_options: expected a mapping of keyword arguments"),
    ],
)
def test_bad_hyper_parameters(field, value, message):
    with pytest.raises(ValueError, match=message):
        TrainingRecipe.from_dict({field: value})


def test_overwrite_and_resume_exclude_each_other():
    with pytest.raises(ValueError, match="overwrite, resume: choose one"):
        TrainingRecipe(overwrite=True, resume=True)


def test_numeric_strings_are_numbers():
    recipe = TrainingRecipe(learning_rate="3e-5", epochs="2")
    assert recipe.learning_rate == 3e-5 and recipe.epochs == 2.0


# --------------------------------------------------------------------------- recipe files


RECIPE = {"model": "some/model", "datasets": ["stsb", "mrpc"], "loss": "cosent", "batch_size": 16, "learning_rate": 3e-5,
          "loss_options": {"scale": 20.0}, "eval_tasks": ["stsb"]}


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".json"])
def test_from_file_with_overrides_winning(tmp_path, suffix):
    path = tmp_path / f"recipe{suffix}"
    path.write_text(json.dumps(RECIPE) if suffix == ".json" else yaml.safe_dump(RECIPE))
    recipe = TrainingRecipe.from_file(path)
    assert {k: getattr(recipe, k) for k in RECIPE} == RECIPE
    recipe = TrainingRecipe.from_file(path, {"batch_size": 4, "loss": "mnrl"})
    assert recipe.batch_size == 4 and recipe.loss == "mnrl"
    assert recipe.model == "some/model" and recipe.learning_rate == 3e-5


def test_yaml_exponent_without_dot(tmp_path):
    # YAML 1.1 (PyYAML) reads `2e-5` as the string '2e-5'; the recipe must still get a float
    path = tmp_path / "recipe.yaml"
    path.write_text("learning_rate: 2e-5\nepochs: 1\ndatasets: stsb,mrpc\n")
    recipe = TrainingRecipe.from_file(path)
    assert recipe.learning_rate == pytest.approx(2e-5) and isinstance(recipe.learning_rate, float)
    assert recipe.datasets == ["stsb", "mrpc"]


def test_empty_yaml_is_the_defaults(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text("# nothing yet\n")
    assert TrainingRecipe.from_file(path) == TrainingRecipe()


def test_bundled_recipes_load():
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "scripts" / "recipes"
    for path in sorted(folder.glob("*.y*ml")):
        for recipe in _runs(TrainingRecipe.from_file(path)):
            entry = get_loss_entry(recipe.loss)
            entry.check_options(recipe.loss_options)
            check_train_datasets(recipe.datasets, entry.data_format)


def _runs(recipe):
    """A recipe's training runs: its stages in order, or itself."""
    from contrastive_bert.training.stages import stage_recipes

    return stage_recipes(recipe) if recipe.stages else [recipe]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("recipe.yaml", None, r"recipe: file not found: .*recipe.yaml"),
        ("recipe.toml", "x = 1", r"recipe: expected a .yaml, .yml or .json file, got recipe.toml"),
        ("recipe.yaml", "- a\n- b\n", r"recipe: .*recipe.yaml must hold a mapping of fields, got list"),
        ("recipe.json", '{"batch_sise": 8}', r"recipe: unknown field 'batch_sise' \(did you mean 'batch_size'\?\)"),
        ("recipe.yaml", "batch_size: 0\n", "batch_size: expected a positive integer, got 0"),
    ],
)
def test_bad_recipe_files(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=message):
        TrainingRecipe.from_file(path)


# --------------------------------------------------------------------------- losses


def test_baseline_losses_registered():
    assert {"mnrl", "cached_mnrl", "cosent"} <= set(LOSSES)
    assert get_loss_entry("mnrl").data_format == "pairs"
    assert get_loss_entry("cached_mnrl").data_format == "pairs"
    assert get_loss_entry("cosent").data_format == "scored_pairs"


def test_unknown_loss_suggests():
    with pytest.raises(ValueError, match=r"loss: unknown loss 'mnlr'; known: .*cosent.*Did you mean 'mnrl'"):
        get_loss_entry("mnlr")


@pytest.mark.parametrize(("typed", "said"), [
    ("CoSENTLoss", "'CoSENTLoss' here is cosent."),  # sentence-transformers' class name
    ("MultipleNegativesRankingLoss", "'MultipleNegativesRankingLoss' here is mnrl."),
    ("SupConLoss", "'SupConLoss' here is acl (loss_options: {mode: supcon})."),  # a paper's name
    ("Queue-InfoNCE", "'Queue-InfoNCE' here is queue_infonce."),  # a registered name written otherwise
])
def test_a_loss_named_as_the_field_names_it_says_what_it_is_here(typed, said):
    with pytest.raises(ValueError) as caught:
        get_loss_entry(typed)
    assert str(caught.value).endswith(f"known: {', '.join(sorted(LOSSES))}. {said}")


def test_an_unknown_loss_far_from_every_name_gets_no_suggestion():
    with pytest.raises(ValueError) as caught:
        get_loss_entry("nonsense")
    assert "Did you mean" not in str(caught.value) and " here is " not in str(caught.value)


def test_register_loss_checks_format():
    with pytest.raises(ValueError, match=r"data_format: expected one of \('pairs', 'scored_pairs', 'labelled'\), got 'triplets'"):
        register_loss(LossEntry("x", "triplets", lambda *a: nn.Identity()))
    assert "x" not in LOSSES


@pytest.mark.parametrize("name, cls", [("mnrl", "MultipleNegativesRankingLoss"),
                                       ("cached_mnrl", "CachedMultipleNegativesRankingLoss"),
                                       ("cosent", "CoSENTLoss")])
def test_baseline_losses_build(tiny_model, name, cls):
    recipe = TrainingRecipe(loss=name)
    loss = get_loss_entry(name).build(tiny_model, [], recipe)
    assert type(loss).__name__ == cls
    assert loss.model is tiny_model


def test_loss_options_are_passed(tiny_model):
    recipe = TrainingRecipe(loss="cached_mnrl", loss_options={"scale": 10.0, "mini_batch_size": 4})
    loss = get_loss_entry("cached_mnrl").build(tiny_model, [], recipe)
    assert loss.scale == 10.0 and loss.mini_batch_size == 4


def test_build_loss_builds_sentence_transformers_losses(tiny_model):
    """The benchmarks' sentence-transformers losses come from the registry, with their options."""
    from contrastive_bert.training.losses_registry import build_loss

    angle = build_loss("angle", tiny_model, [], {"scale": 50.0}, batch_size=8)
    assert type(angle).__name__ == "AnglELoss" and angle.scale == 50.0 and get_loss_entry("angle").data_format == "scored_pairs"
    mnrl = build_loss("mnrl", tiny_model, [], {"scale": 20.0, "hardness_mode": "in_batch_negatives", "hardness_strength": 5.0,
                                               "gather_across_devices": False, "directions": ["query_to_doc", "doc_to_query"],
                                               "partition_mode": "per_direction"}, batch_size=8)
    assert (mnrl.hardness_mode, mnrl.hardness_strength, mnrl.directions) == ("in_batch_negatives", 5.0, ("query_to_doc", "doc_to_query"))
    guide = copy.deepcopy(tiny_model)
    gist = build_loss("gist", tiny_model, [], {"guide_model": guide, "temperature": 0.05}, batch_size=8)
    assert type(gist).__name__ == "GISTEmbedLoss" and gist.guide is guide and gist.temperature == 0.05
    assert not any(p.requires_grad for p in guide.parameters()) and not guide.training
    cached = build_loss("cached_gist", tiny_model, [], {"guide_model": guide}, batch_size=8)
    assert type(cached).__name__ == "CachedGISTEmbedLoss" and cached.mini_batch_size == 32
    with pytest.raises(ValueError, match=r"loss_options.hardness_mode: expected one of"):
        build_loss("mnrl", tiny_model, [], {"hardness_mode": "hard"}, batch_size=8)


def test_gist_default_guide_is_the_bundled_model_frozen(tiny_model):
    """``guide_model`` defaults to the bundled model, on the trained model's device, frozen, with
    the trained model's max_seq_length."""
    from contrastive_bert.losses.guide_filter import load_guide_model
    guide = load_guide_model("default", tiny_model)
    assert guide.max_seq_length == tiny_model.max_seq_length == 32
    assert guide.device == tiny_model.device and not guide.training
    assert not any(p.requires_grad for p in guide.parameters())
    assert guide.get_embedding_dimension() == 384  # all-MiniLM-L6-v2, not a copy of the trained model
    with pytest.raises(ValueError, match="guide_model: expected a model name or path"):
        load_guide_model(3, tiny_model)


@pytest.mark.parametrize("name, options, message", [
    ("mnrl", {"hardness_strength": -1}, "loss_options.hardness_strength: expected a number >= 0, got -1"),
    ("mnrl", {"directions": "query_to_doc"}, "loss_options.directions: expected a non-empty list"),
    ("mnrl", {"partition_mode": "both"}, "loss_options.partition_mode: expected one of 'joint', 'per_direction'"),
    ("cached_mnrl", {"gather_across_devices": "yes"}, "loss_options.gather_across_devices: expected true or false"),
    ("angle", {"temperature": 0.05}, "loss_options.temperature: unknown option of loss 'angle'"),
    ("gist", {"temperature": 0}, "loss_options.temperature: expected a positive number, got 0"),
    ("gist", {"margin_strategy": "ratio"}, "loss_options.margin_strategy: expected one of 'absolute', 'relative'"),
    ("gist", {"guide_model": 3}, "loss_options.guide_model: expected a model name or path"),
    ("cached_gist", {"mini_batch_size": 0}, "loss_options.mini_batch_size: expected a positive integer, got 0"),
])
def test_sentence_transformers_option_values(name, options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        get_loss_entry(name).check_options(options)


# --------------------------------------------------------------------------- training data


@pytest.mark.parametrize(
    "names, data_format, message",
    [
        (["banking77"], "pairs", r"datasets: 'banking77' is a classification data set, but this loss trains on pairs"),
        (["answer_selection"], "scored_pairs", "'answer_selection' is a reranking data set, but this loss trains on scored_pairs"),
        (["stsb"], "labelled", "'stsb' is a pair-score data set, but this loss trains on labelled"),
        (["emotion", "sst2"], "labelled", "a classification loss trains on exactly one labelled data set"),
        (["stsb", "mprc"], "pairs", r"unknown data set 'mprc'.*Did you mean 'mrpc'"),
    ],
)
def test_incompatible_training_data(names, data_format, message):
    with pytest.raises(ValueError, match=message):
        check_train_datasets(names, data_format)


def test_labelled_negative_triplets_by_hand():
    from datasets import Dataset

    from contrastive_bert.data import labelled_negative_triplets

    split = Dataset.from_dict({
        "question": ["q1", "q1", "q1", "q1", "q2", "q2", "q3"],
        "answer": ["a1", "w1", "a2", "w2", "b1", "x1", "c1"],
        "label": [1, 0, 1, 0, 1, 0, 1],
    })
    rows = labelled_negative_triplets(split, seed=0)
    assert rows.column_names == ["anchor", "positive", "negative"]
    assert rows["anchor"] == ["q1", "q1", "q2"]  # q3 has no wrong candidate: no row
    assert rows["positive"] == ["a1", "a2", "b1"]
    assert set(rows["negative"][:2]) <= {"w1", "w2"} and rows["negative"][2] == "x1"
    with pytest.raises(ValueError, match="reranking split"):
        labelled_negative_triplets(Dataset.from_dict({"text": ["a"], "label": [0]}))


def test_labelled_negatives_from_a_recipe(shared_data):
    rows = build_train_dataset(["answer_selection"], "pairs", data_dir=shared_data, labelled_negatives=True, seed=0)
    assert rows.column_names == ["anchor", "positive", "negative"]
    assert len(rows) == 342  # 348 correct answers, 6 of them to questions without a wrong candidate
    from contrastive_bert.data import load_dataset

    raw = load_dataset("answer_selection", split="train", data_dir=shared_data)
    wrong = {(q, a) for q, a, y in zip(raw["question"], raw["answer"], raw["label"]) if y == 0}
    assert all((q, n) in wrong for q, n in zip(rows["anchor"], rows["negative"]))
    for names, data_format, message in [
        (["stsb"], "pairs", r"labelled_negatives: needs reranking data sets .*\['stsb'\]"),
        (["answer_selection"], "scored_pairs", "labelled_negatives: only for losses that train on pairs"),
    ]:
        with pytest.raises(ValueError, match=message):
            check_train_datasets(names, data_format, labelled_negatives=True)
    with pytest.raises(ValueError, match="labelled_negatives: expected true or false"):
        TrainingRecipe(labelled_negatives="yes")


def test_build_train_dataset_formats(shared_data):
    pairs = build_train_dataset(["stsb", "mrpc"], "pairs", data_dir=shared_data, max_samples=None)
    assert pairs.column_names == ["anchor", "positive"]
    assert len(pairs) == 1406 + 2407  # STS-B train scores >= 4/5, MRPC train paraphrases
    scored = build_train_dataset(["mrpc"], "scored_pairs", data_dir=shared_data, max_samples=50, seed=1)
    assert scored.column_names == ["sentence1", "sentence2", "score"] and len(scored) == 50
    assert set(scored["score"]) <= {0.0, 1.0}
    again = build_train_dataset(["mrpc"], "scored_pairs", data_dir=shared_data, max_samples=50, seed=1)
    assert again["sentence1"] == scored["sentence1"]  # the seed fixes the shuffle
    labelled = build_train_dataset(["emotion"], "labelled", data_dir=shared_data, max_samples=10)
    assert labelled.column_names == ["text", "label"] and len(labelled) == 10
    strict = build_train_dataset(["stsb"], "pairs", data_dir=shared_data, min_pair_score=1.0)
    assert len(strict) == 266  # STS-B train pairs with gold 5.0


# --------------------------------------------------------------------------- output directory


def _fake_run(folder):
    (folder / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    (folder / "checkpoints" / "checkpoint-10").mkdir(parents=True)
    (folder / "final").mkdir()
    (folder / "final" / "model.safetensors").write_text("w")
    (folder / "results.json").write_text("{}")
    (folder / "recipe.json").write_text("{}")
    (folder / "scores_before.json").write_text("{}")
    (folder / "stage-2").mkdir()
    (folder / "my_notes.txt").write_text("keep me")
    (folder / "plots").mkdir()
    (folder / "plots" / "loss.png").write_text("png")
    (folder / "stages.txt").write_text("not ours")


def test_output_dir_new_or_empty(tmp_path):
    assert prepare_output_dir(tmp_path / "new") is None
    (tmp_path / "empty").mkdir()
    assert prepare_output_dir(tmp_path / "empty") is None


def test_output_dir_existing_refused(tmp_path):
    _fake_run(tmp_path)
    with pytest.raises(ValueError, match="output_dir: .* already exists and is not empty; pass --overwrite"):
        prepare_output_dir(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="output_dir: .*file exists and is not a directory"):
        prepare_output_dir(tmp_path / "file")


def test_output_dir_overwrite_keeps_user_files(tmp_path):
    _fake_run(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert prepare_output_dir(tmp_path, overwrite=True) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # checking removes nothing
    removed = clear_run(tmp_path)
    assert sorted(p.name for p in removed) == ["checkpoints", "final", "recipe.json", "results.json", "scores_before.json", "stage-2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_notes.txt", "plots", "stages.txt"]
    assert (tmp_path / "my_notes.txt").read_text() == "keep me"
    assert (tmp_path / "plots" / "loss.png").is_file()


def test_output_dir_resume(tmp_path):
    _fake_run(tmp_path)
    last = prepare_output_dir(tmp_path, resume=True)
    assert last == str(tmp_path / "checkpoints" / "checkpoint-10")  # numeric, not lexical, order


def test_output_dir_resume_without_run(tmp_path):
    with pytest.raises(ValueError, match="resume: .* holds no run to resume"):
        prepare_output_dir(tmp_path / "new", resume=True)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="resume: no checkpoint-\\* folder under .*checkpoints"):
        prepare_output_dir(tmp_path, resume=True)


# --------------------------------------------------------------------------- check_recipe


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"loss": "infonce"}, "loss: unknown loss 'infonce'"),
        ({"loss": "cosent", "datasets": ["answer_selection"]}, "'answer_selection' is a reranking data set, but this loss trains on scored_pairs"),
        ({"loss": "mnrl", "datasets": ["sst2"]}, "'sst2' is a classification data set, but this loss trains on pairs"),
        ({"eval_tasks": ["stsb", "emtion"]}, r"unknown data set 'emtion'.*Did you mean 'emotion'"),
        ({"dev_task": "stsbb"}, "unknown data set 'stsbb'"),
        ({"mixed_precision": "fp16"}, "mixed_precision: 'fp16' needs a CUDA device"),
    ],
)
def test_check_recipe_errors(tmp_path, fields, message):
    import torch

    if fields.get("mixed_precision") == "fp16" and torch.cuda.is_available():
        pytest.skip("fp16 is valid with CUDA")
    recipe = TrainingRecipe(output_dir=str(tmp_path / "run"), **fields)
    with pytest.raises(ValueError, match=message):
        check_recipe(recipe)
    assert not (tmp_path / "run").exists()


def test_check_recipe_ok(tmp_path):
    entry, checkpoint = check_recipe(TrainingRecipe(output_dir=str(tmp_path / "run"), loss="cosent", datasets=["stsb", "mrpc"]))
    assert entry.name == "cosent" and checkpoint is None


def test_check_recipe_revalidates_mutated_fields(tmp_path):
    recipe = TrainingRecipe(output_dir=str(tmp_path / "run"))
    recipe.batch_size = 0
    with pytest.raises(ValueError, match="batch_size: expected a positive integer"):
        check_recipe(recipe)


def test_training_arguments_from_recipe(tmp_path):
    recipe = TrainingRecipe(batch_size=8, learning_rate=1e-4, max_steps=12, warmup_ratio=0.25, max_grad_norm=None,
                            eval_steps=3, save_steps=6, seed=7)
    args = training_arguments(recipe, str(tmp_path), batch_sampler="no_duplicates", has_evaluator=False)
    assert args.per_device_train_batch_size == 8 and args.learning_rate == 1e-4 and args.max_steps == 12
    assert args.max_grad_norm == 0.0 and args.seed == 7 and args.save_steps == 6
    assert args.eval_strategy == "no"
    assert args.batch_sampler == "no_duplicates"
    assert args.warmup_steps == 0.25  # a float < 1 is a ratio of the total steps
    args = training_arguments(recipe, str(tmp_path), has_evaluator=True)
    assert args.eval_strategy == "steps" and args.eval_steps == 3


def test_bundled_recipes_build_their_losses(tiny_model, shared_data):
    """Every recipe in scripts/recipes/ names loss options its loss accepts."""
    import copy
    from pathlib import Path

    from contrastive_bert.training.train_data import build_train_dataset

    folder = Path(__file__).resolve().parents[2] / "scripts" / "recipes"
    for path in sorted(folder.glob("*.y*ml")):
        model = copy.deepcopy(tiny_model)  # stages build on the model the stage before left
        for recipe in _runs(TrainingRecipe.from_file(path, {"data_dir": str(shared_data)})):
            entry = get_loss_entry(recipe.loss)
            if "exit_layers" in recipe.loss_options:  # the tiny BERT has 2 layers: one exit below the last
                recipe.loss_options = {**recipe.loss_options, "exit_layers": [1]}
            rows = build_train_dataset(recipe.datasets, entry.data_format, data_dir=str(shared_data), max_samples=64)
            loss = entry.build(model, rows, recipe)
            assert loss.get_config_dict() is not None, path.name


# --------------------------------------------------------------------------- loss options without a model


class _CheckedLoss:
    """A loss class with the check_options contract, for the registry tests."""

    def __init__(self, model, temperature: float = 0.1, size: int = 4) -> None:
        self.check_options({"temperature": temperature, "size": size})

    @classmethod
    def check_options(cls, options) -> None:
        if "temperature" in options and not options["temperature"] > 0:
            raise ValueError(f"loss_options.temperature: expected a positive number, got {options['temperature']}")


def test_every_registered_loss_names_its_options():
    for name, entry in LOSSES.items():
        assert entry.options_from, f"{name}: register it with options_from=('module:LossClass',)"
        assert entry.option_names(), name


def test_loss_options_checked_against_the_signature_and_the_class(monkeypatch):
    import sys
    import types

    module = types.ModuleType("fake_losses")
    module.CheckedLoss = _CheckedLoss
    monkeypatch.setitem(sys.modules, "fake_losses", module)
    entry = LossEntry("checked", "pairs", lambda *a: None, options_from=("fake_losses:CheckedLoss",), extra_options=("cached",))
    assert entry.option_names() == {"temperature", "size", "cached"}  # model is the builder's, not an option
    entry.check_options({"temperature": 0.5, "cached": True})
    with pytest.raises(ValueError, match=r"^loss_options.temprature: unknown option of loss 'checked' \(did you mean 'temperature'\?\); options are cached, size, temperature$"):
        entry.check_options({"temprature": 0.5})
    with pytest.raises(ValueError, match=r"^loss_options.temperature: expected a positive number, got 0$"):
        entry.check_options({"temperature": 0})
    with pytest.raises(ValueError, match="loss_options: expected a mapping"):
        entry.check_options(["temperature"])


@pytest.mark.parametrize("name, options, message", [
    ("mnrl", {"scale": -1}, "loss_options.scale: expected a positive number, got -1"),
    ("mnrl", {"scale": True}, "loss_options.scale: expected a positive number, got True"),
    ("cached_mnrl", {"mini_batch_size": 2.5}, "loss_options.mini_batch_size: expected a positive integer, got 2.5"),
    ("cosent", {"scael": 1}, "did you mean 'scale'"),
])
def test_sentence_transformers_loss_options(name, options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        get_loss_entry(name).check_options(options)
    get_loss_entry(name).check_options({"scale": 20.0})


def test_check_recipe_checks_loss_options(tmp_path):
    with pytest.raises(ValueError, match="loss_options.scael: unknown option of loss 'mnrl'"):
        check_recipe(TrainingRecipe(loss_options={"scael": 1}, output_dir=str(tmp_path / "run")))
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- resume as recorded


def test_resume_overrides_and_conflicts(tmp_path):
    recorded = TrainingRecipe(loss="cosent", batch_size=8, max_steps=10, output_dir=str(tmp_path))
    write_json(tmp_path / "recipe.json", recorded.recorded())
    resumed = TrainingRecipe.for_resume(tmp_path, {"max_steps": 20})
    assert resumed.loss == "cosent" and resumed.batch_size == 8 and resumed.max_steps == 20 and resumed.resume
    assert resumed.resume_overrides(recorded) == {"max_steps": (10, 20)}
    assert TrainingRecipe.for_resume(tmp_path, {"batch_size": 8, "datasets": "stsb"}).batch_size == 8  # same values: fine
    with pytest.raises(ValueError, match=r"^batch_size: the run in .* was recorded with 8, got 32; --resume continues a run as recorded"):
        TrainingRecipe.for_resume(tmp_path, {"batch_size": 32})
    with pytest.raises(ValueError, match=r"^loss_options: the run in .* was recorded with \{\}, got \{'scale': 5\}"):
        TrainingRecipe.for_resume(tmp_path, {"loss_options": {"scale": 5}})
    with pytest.raises(ValueError, match=r"^resume: .*recipe.json not found"):
        TrainingRecipe.for_resume(tmp_path / "other", {})


def test_write_json_is_strict_json(tmp_path, caplog):
    path = write_json(tmp_path / "r.json", {"a": float("nan"), "b": [1.0, float("inf")], "c": 2})
    assert json.loads(path.read_text()) == {"a": None, "b": [1.0, None], "c": 2}
    assert "r.json.a: nan is not a finite number" in caplog.text


def test_declared_option_names_equal_the_installed_signatures():
    """Names a sentence-transformers entry declares (no import) are its class's constructor keywords
    (plus what the builder consumes itself: ``guide_model``)."""
    from contrastive_bert.training.losses_registry import declared_option_names, import_target, keyword_names

    declared = 0
    for name, entry in LOSSES.items():
        if not entry.options:
            continue
        declared += 1
        (target,) = entry.options_from
        names, open_ended = keyword_names(import_target(target))
        assert not open_ended and set(entry.options) - {"guide_model"} == names, name
    assert declared >= 6  # mnrl, cached_mnrl, cosent, angle, gist, cached_gist
    for name, entry in LOSSES.items():  # this package's losses: each class declares its names
        for target in entry.options_from if not entry.options else ():
            names, _ = declared_option_names(import_target(target))
            assert names, (name, target)


def test_the_registry_reads_no_source():
    import contrastive_bert.training.losses_registry as registry

    text = Path(registry.__file__).read_text()
    assert not re.search(r"\bast\b", text) and "read_text" not in text


def test_misspelled_option_of_a_sentence_transformers_loss_imports_nothing_heavy():
    import subprocess
    import sys

    code = ("import sys\nfrom contrastive_bert.training.losses_registry import get_loss_entry\n"
            "try:\n    get_loss_entry('mnrl').check_options({'scael': 1})\nexcept ValueError as e:\n    print(e)\n"
            "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].startswith("loss_options.scael: unknown option of loss 'mnrl'") and out[1] == "[]"
