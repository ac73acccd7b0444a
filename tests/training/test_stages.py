"""Two-stage multi-exit recipes: the two CLI commands end to end on a tiny model, resume of the
interrupted stage, and the one-line errors raised before anything trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from contrastive_bert.training.recipe import TrainingRecipe

RECIPE = Path(__file__).resolve().parents[2] / "scripts" / "recipes" / "banking77_multi_exit.yaml"


@pytest.fixture(scope="module")
def tiny6_path(tmp_path_factory):
    """A saved 6-layer, 32-d random BERT sentence encoder (the recipe's exits on layers 2-5 fit)."""
    from conftest import build_tiny_model

    root = tmp_path_factory.mktemp("tiny6")
    build_tiny_model(root, num_layers=6).save(str(root / "st"))
    return str(root / "st")


def _short_recipe(tmp_path: Path, steps: int = 2, save_steps: int = 100, recipe: Path = RECIPE,
                  stage1_loss_options: dict | None = None) -> Path:
    """A bundled multi-exit recipe with a few steps per stage (stage 1's loss options updated by ``stage1_loss_options``)."""
    values = yaml.safe_load(recipe.read_text())
    for stage in values["stages"]:
        stage["max_steps"] = steps
    values["stages"][0]["loss_options"].update(stage1_loss_options or {})
    values["save_steps"] = save_steps
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def _train_args(recipe: Path, model: str, output: Path) -> list[str]:
    return ["train", "--recipe", str(recipe), "--model", model, "--output-dir", str(output),
            "--max-train-samples", "400", "--batch-size", "8", "--max-seq-length", "16"]


def test_train_then_early_exit_sweep_through_the_cli(tiny6_path, tmp_path, shared_data, monkeypatch, capsys):
    from sentence_transformers import SentenceTransformer

    from contrastive_bert.cli import main
    from contrastive_bert.heads.exits import MultiExitHeads
    from contrastive_bert.inference.early_exit import EarlyExitClassifier

    monkeypatch.setenv("CONTRASTIVE_BERT_DATA", str(shared_data))
    out = tmp_path / "run"
    assert main([*_train_args(_short_recipe(tmp_path), tiny6_path, out), "--max-eval-samples", "300"]) == 0
    for folder in ("stage-1/final", "stage-2/final", "final"):
        assert (out / folder / "modules.json").is_file(), folder
    results = json.loads((out / "results.json").read_text())
    assert [s["recipe"]["loss"] for s in results["stages"]] == ["acl", "cross_layer"]
    assert [s["global_step"] for s in results["stages"]] == [2, 2]
    multi = results["multi_exit"]
    assert multi["rows"] == 300 and set(multi["exit_accuracy"]) == {"2", "3", "4", "5", "6"}
    assert multi["final_layer_accuracy"] == multi["exit_accuracy"]["6"] == multi["early_exit"]["full"]["accuracy"]
    assert multi["early_exit"]["criterion"] == "margin" and len(multi["early_exit"]["sweep"]) >= 3
    said = capsys.readouterr().out  # the run ends by saying what each exit reached and how to choose a threshold
    accuracy = multi["exit_accuracy"]
    assert (f"test accuracy on banking77 (300 rows) by exit layer: 2 {accuracy['2']:.2f}, 3 {accuracy['3']:.2f}, "
            f"4 {accuracy['4']:.2f}, 5 {accuracy['5']:.2f}, 6 {accuracy['6']:.2f} (layer 6: the final classifier)") in said
    assert f"choose an early-exit threshold on dev: contrastive-bert early-exit --model {out}/final --sweep --dataset banking77" in said
    assert "no before/after scores" not in said
    # stage 2 trained the exits only: the encoder of final/ is stage 1's
    stage1 = SentenceTransformer(str(out / "stage-1" / "final"), device="cpu", trust_remote_code=True)
    final = SentenceTransformer(str(out / "final"), device="cpu", trust_remote_code=True)
    assert isinstance(final[-1], MultiExitHeads) and final[-1].head_type == "mha"
    texts = ["how do I top up my card", "my card was declined"]
    assert (stage1.encode(texts) == final.encode(texts)).all()
    classifier = EarlyExitClassifier.from_pretrained(str(out / "final"), "margin")
    assert classifier.heads.exit_layers == [2, 3, 4, 5] and classifier.heads.head_layers == [2, 3, 4, 5, 6]
    # the saved card shows the lines that load it
    card = (out / "final" / "README.md").read_text()
    assert 'SentenceTransformer("sentence_transformers_model_id", trust_remote_code=True)' in card
    assert "model = load_model(path)" in card and "`MultiExitHeads`" in card
    capsys.readouterr()
    # the second command: the setting chosen on dev, its figures on the same 300 test rows
    assert main(["early-exit", "--model", str(out / "final"), "--sweep", "--dataset", "banking77", "--criterion", "margin",
                 "--max-samples", "300", "--max-accuracy-loss", "100", "--output", str(tmp_path / "sweep.json")]) == 0
    sweep = json.loads((tmp_path / "sweep.json").read_text())
    assert sweep["test_rows"] == 300 and sweep["dev"]["rows"] == 300
    assert [s["threshold"] for s in sweep["dev"]["sweep"]] == [s["threshold"] for s in multi["early_exit"]["sweep"]]
    fewest = min(s["avg_layers"] for s in sweep["dev"]["sweep"])  # 100 points of slack: the fewest layers wins
    assert sweep["dev_choice"]["avg_layers"] == fewest
    assert sweep["test"]["32"]["full"]["accuracy"] == multi["final_layer_accuracy"]
    assert "chosen on dev: margin" in capsys.readouterr().out
    # resuming the finished run is a message, exit 0, nothing rewritten
    stamps = {p: p.stat().st_mtime_ns for p in [out / "results.json", *(out / "final").rglob("*")]}
    assert main(["train", "--output-dir", str(out), "--resume"]) == 0
    assert "already finished" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


def test_resume_continues_the_interrupted_stage(tiny6_path, tmp_path, shared_data, monkeypatch):
    import shutil

    import contrastive_bert.training.runner as runner
    from contrastive_bert.training.runner import train

    monkeypatch.setenv("CONTRASTIVE_BERT_DATA", str(shared_data))
    out = tmp_path / "run"
    values = {**yaml.safe_load(_short_recipe(tmp_path, steps=3, save_steps=2).read_text()), "model": tiny6_path,
              "output_dir": str(out), "max_train_samples": 400, "batch_size": 8, "max_seq_length": 16,
              "max_eval_samples": 0}  # 0: no per-exit evaluation, no sweep
    train(TrainingRecipe.from_dict(values))
    stage1_weights = (out / "stage-1" / "final" / "model.safetensors").stat().st_mtime_ns
    # interrupt stage 2 after its checkpoint at step 2
    shutil.rmtree(out / "stage-2" / "final")
    shutil.rmtree(out / "stage-2" / "checkpoints" / "checkpoint-3")
    (out / "results.json").unlink()
    calls = []
    real_fit = runner.fit
    monkeypatch.setattr(runner, "fit", lambda *a, **k: calls.append(k.get("resume_from_checkpoint")) or real_fit(*a, **k))
    train(TrainingRecipe.for_resume(out, {}))
    assert len(calls) == 1 and calls[0].endswith("stage-2/checkpoints/checkpoint-2")  # stage 1 skipped
    assert (out / "stage-1" / "final" / "model.safetensors").stat().st_mtime_ns == stage1_weights
    results = json.loads((out / "results.json").read_text())
    assert [s["global_step"] for s in results["stages"]] == [3, 3]
    assert "multi_exit" not in results
    # the resumed stage's seconds are whole (its checkpoint carried them), and so the run's
    carried = results["stages"][1]["train_seconds_before_resume"]
    assert carried > 0 and "train_seconds_before_resume" not in results["stages"][0]
    assert results["train_seconds_before_resume"] == carried
    assert results["train_seconds"] == pytest.approx(sum(s["train_seconds"] for s in results["stages"]))


def _staged(tiny6_path: str, tmp_path: Path, stages: list[dict]) -> TrainingRecipe:
    return TrainingRecipe.from_dict({"model": tiny6_path, "datasets": ["banking77"], "dev_task": None, "eval_tasks": [],
                                     "output_dir": str(tmp_path / "never"), "stages": stages})


ACL = {"loss": "acl", "max_steps": 2}


@pytest.mark.parametrize("stages, message", [
    ([ACL, {"loss": "cross_layer", "loss_options": {"exit_layers": [2, 6]}}],
     r"^stages\[1\]\.loss_options\.exit_layers: layer 6 is the last layer"),
    ([ACL, {"loss": "cross_layer", "loss_options": {"exit_layers": [0, 3]}}], r"^stages\[1\]\.loss_options\.exit_layers: "),
    ([ACL, {"loss": "cross_layer", "loss_options": {"exit_layers": [3, 7]}}],
     r"^stages\[1\]\.loss_options\.exit_layers: layers \[7\] are out of range"),
    ([{"loss": "cross_layer"}], r"^stages\[0\]\.loss: 'cross_layer' needs a model with a classifier"),
    ([{"loss": "mnrl", "datasets": ["stsb"]}, {"loss": "cross_layer"}], r"^stages\[1\]\.loss: 'cross_layer' needs a model with a classifier"),
    ([ACL, {"loss": "cross_layer", "loss_options": {"method": "mse"}}], r"^stages\[1\]\.loss_options\.method: "),
    ([ACL, {"loss": "cross_layer", "loss_options": {"exit_head": "conv"}}], r"^stages\[1\]\.loss_options\.exit_head: "),
    ([ACL, {"loss": "cross_layer", "loss_options": {"exit_heads": "mha"}}], r"^stages\[1\]\.loss_options\.exit_heads: unknown option"),
    ([ACL, {"loss": "cross_layer", "learning_rate": 0}], r"^stages\[1\]\.learning_rate: "),
    ([ACL, {"loss": "cross_layer", "model": "default"}], r"^stages\[1\]\.model: "),
])
def test_bad_stage_is_one_line_error_before_training(tiny6_path, tmp_path, stages, message, monkeypatch):
    import contrastive_bert.training.runner as runner
    from contrastive_bert.training.runner import train

    monkeypatch.setattr(runner, "fit", lambda *a, **k: pytest.fail("trained despite a bad recipe"))
    with pytest.raises(ValueError, match=message) as error:
        train(_staged(tiny6_path, tmp_path, stages))
    assert "\n" not in str(error.value)
    assert not (tmp_path / "never").exists()


def test_unknown_stage_field_named_when_the_recipe_is_read():
    with pytest.raises(ValueError, match=r"^stages\[1\]\.lose: unknown field \(did you mean 'loss'\?\)$"):
        TrainingRecipe.from_dict({"stages": [{"loss": "acl"}, {"lose": "cross_layer"}]})
    with pytest.raises(ValueError, match=r"^stages: expected a list"):
        TrainingRecipe.from_dict({"stages": {"loss": "acl"}})


def test_bundled_multi_exit_recipes_pass_every_check(tmp_path):
    from contrastive_bert.training.stages import check_stages

    for name in ("banking77_multi_exit.yaml", "emotion_multi_exit.yaml"):
        recipe = TrainingRecipe.from_file(RECIPE.parent / name, {"output_dir": str(tmp_path / name)})
        stages = check_stages(recipe)
        assert [s.loss for s in stages] == ["acl", "cross_layer"]
        assert stages[1].model.endswith("stage-1/final") and stages[1].loss_options["exit_head"] == "mha"


def test_emotion_recipe_carries_encoded_label_names_into_the_exits(tiny6_path, tmp_path, shared_data, monkeypatch):
    """The emotion recipe with stage 1 on encoded label names (its choice before the full-data grid; it now
    trains free vectors) hands its head to stage 2: the final model's classifier rows are the encoder's
    embeddings of the six names, and every exit scores."""
    import torch
    from sentence_transformers import SentenceTransformer

    from contrastive_bert.cli import main
    from contrastive_bert.heads.encoded_label import EncodedLabelClassifier
    from contrastive_bert.heads.label_embedding import find_label_head

    monkeypatch.setenv("CONTRASTIVE_BERT_DATA", str(shared_data))
    out = tmp_path / "run"
    recipe = _short_recipe(tmp_path, recipe=RECIPE.parent / "emotion_multi_exit.yaml",
                           stage1_loss_options={"label_embedding": "encoded", "label_template": "{}"})
    assert main([*_train_args(recipe, tiny6_path, out), "--max-eval-samples", "200"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["stages"][0]["recipe"]["loss_options"]["label_embedding"] == "encoded"
    assert set(results["multi_exit"]["exit_accuracy"]) == {"2", "3", "4", "5", "6"}
    stage1 = SentenceTransformer(str(out / "stage-1" / "final"), device="cpu", trust_remote_code=True)
    head = find_label_head(stage1)
    assert isinstance(head, EncodedLabelClassifier)
    assert head.label_names == ["sadness", "joy", "love", "anger", "fear", "surprise"]
    encoded = stage1.encode(head.label_texts, convert_to_tensor=True)
    torch.testing.assert_close(head.weight, encoded, atol=1e-5, rtol=1e-4)


def test_offline_data_is_an_error_before_anything_is_written(tiny6_path, tmp_path, monkeypatch):
    from contrastive_bert.training.runner import train

    monkeypatch.delenv("CONTRASTIVE_BERT_DATA", raising=False)
    monkeypatch.setattr("contrastive_bert.data.hub.hub_reachable", lambda: False)
    with pytest.raises(ValueError, match=r"^stages\[0\]\.dataset 'banking77': no local data root given"):
        train(_staged(tiny6_path, tmp_path, [ACL, {"loss": "cross_layer"}]))
    assert not (tmp_path / "never").exists()


def test_emotion_recipe_as_shipped_trains_free_label_vectors_and_every_exit(tiny6_path, tmp_path, shared_data, monkeypatch):
    """The shipped emotion recipe (the full-data dev choice: free label vectors) gives stage 1 a learned
    label head, not the encoded names', and stage 2 exits on layers 2-5 that all score."""
    from sentence_transformers import SentenceTransformer

    from contrastive_bert.cli import main
    from contrastive_bert.heads.encoded_label import EncodedLabelClassifier
    from contrastive_bert.heads.label_embedding import find_label_head

    monkeypatch.setenv("CONTRASTIVE_BERT_DATA", str(shared_data))
    out = tmp_path / "run"
    recipe = _short_recipe(tmp_path, recipe=RECIPE.parent / "emotion_multi_exit.yaml")
    assert main([*_train_args(recipe, tiny6_path, out), "--max-eval-samples", "200"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["stages"][0]["recipe"]["loss_options"]["label_embedding"] == "free"
    assert set(results["multi_exit"]["exit_accuracy"]) == {"2", "3", "4", "5", "6"}
    head = find_label_head(SentenceTransformer(str(out / "stage-1" / "final"), device="cpu", trust_remote_code=True))
    assert head is not None and not isinstance(head, EncodedLabelClassifier)
    assert head.weight.shape[0] == 6
