"""The remaining rough edges of issue 40, through ``cli.main`` with the tiny BERT: a hub model id
that cannot be had fails before any data loads; a corrupt YAML recipe names the line of the
mistake; a staged recipe is checked once, before its first stage trains; a saved index refuses a
model changed by one small step (naming --overwrite); search says which FAISS index answered;
mining pairs says how many were dropped and why; a folder of documents without queries is pointed
to search, which serves it."""

from __future__ import annotations

import json

import pytest
import torch

import contrastive_bert.data
import contrastive_bert.data.loading
import contrastive_bert.models
import contrastive_bert.training.checks as checks
import contrastive_bert.training.runner as runner
import contrastive_bert.training.train_data as train_data
from contrastive_bert.cli import main

from conftest import make_beir_folder

NO_SCORING = ["--max-eval-samples", "0", "--dev-task", "", "--eval-tasks", "", "--logging-steps", "1", "--save-steps", "100"]


def _one_line_error(capsys, argv: list[str]) -> str:
    """Run ``contrastive-bert ARGV``: exit 2 and one stderr line, no traceback."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _pairs_file(path, rows: list[tuple[str, str]]):
    path.write_text("".join(json.dumps({"anchor": a, "positive": p}) + "\n" for a, p in rows))
    return path


# --------------------------------------------------------------------------- 1. the model is checked before any data loads

@pytest.mark.parametrize("hub", ["offline", "online"])
@pytest.mark.parametrize("stages", [[], ["--stages", '[{"loss": "mnrl"}, {"loss": "cosent"}]']])
def test_a_mistyped_hub_model_fails_before_any_data_loads(tmp_path, shared_data, monkeypatch, capsys, hub, stages):
    """``train --model sentence-transformers/all-MiniLM-L6-v3 --datasets stsb`` used to read STS-B
    (6 s) and then fail on the model: now the model's one-line error comes first, with nothing read."""
    loaded = []

    def load_dataset(name, *args, **kwargs):
        loaded.append(str(name))
        raise AssertionError(f"data set {name} loaded before the model was checked")

    for module in (train_data, contrastive_bert.data.loading, contrastive_bert.data):  # every name it is read by
        monkeypatch.setattr(module, "load_dataset", load_dataset)
    monkeypatch.setattr(contrastive_bert.models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    if hub == "offline":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        why = "the Hugging Face hub cannot be reached (offline) and no copy of it is cached on this machine"
    else:  # no network needed: the hub's answer is stood in for
        monkeypatch.setattr(contrastive_bert.models, "hub_offline", lambda: False)
        monkeypatch.setattr(contrastive_bert.models, "_on_the_hub", lambda repo_id: repo_id != "sentence-transformers/all-MiniLM-L6-v3")
        why = "and the Hugging Face hub has no model of that name"
    run = tmp_path / "run"
    err = _one_line_error(capsys, ["train", "--model", "sentence-transformers/all-MiniLM-L6-v3", "--datasets", "stsb",
                                   "--data-dir", str(shared_data), "--output-dir", str(run), *stages])
    assert f"model: 'sentence-transformers/all-MiniLM-L6-v3' is not a local folder here, {why}" in err
    assert "use --model default (the bundled all-MiniLM-L6-v2)" in err
    assert loaded == [] and not run.exists()


# --------------------------------------------------------------------------- 2. a corrupt YAML recipe names its line

@pytest.mark.parametrize("line6, column", [
    ("learning_rate 2e-5", 1),  # a key without its colon: PyYAML notices on line 7
    ("model: 'my-model", 8),  # a quote never closed: PyYAML notices at the end of the file
])
def test_a_corrupt_yaml_recipe_names_the_line_of_the_mistake(tmp_path, capsys, line6, column):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("datasets: stsb\nloss: mnrl\nbatch_size: 32\nepochs: 1\nseed: 3\n" + line6 + "\nmax_steps: 10\n")
    err = _one_line_error(capsys, ["train", "--recipe", str(recipe)])
    assert f"recipe: {recipe}, line 6, column {column}: not valid YAML (" in err and "line 7" not in err


# --------------------------------------------------------------------------- 3. a staged recipe is checked once

def test_a_staged_recipe_is_checked_once_before_its_first_stage_trains(tmp_path, tiny_loader, monkeypatch, capsys):
    """Every stage's checks run in ``check_stages``, before stage 1 trains; a stage then trains
    without its checks running again (they ran a second time, at each stage's start)."""
    events = []
    check_run_inputs, fit = checks.check_run_inputs, runner.fit

    def recorded_check(recipe):
        events.append(("check", recipe.output_dir.rsplit("/", 1)[-1]))
        return check_run_inputs(recipe)

    def recorded_fit(model, train_dataset, loss, recipe, output_dir, **kwargs):
        events.append(("fit", recipe.output_dir.rsplit("/", 1)[-1]))
        return fit(model, train_dataset, loss, recipe, output_dir, **kwargs)

    monkeypatch.setattr(checks, "check_run_inputs", recorded_check)
    monkeypatch.setattr(runner, "check_run_inputs", recorded_check)
    monkeypatch.setattr(runner, "check_recipe", lambda recipe: pytest.fail("a stage was checked again"))
    monkeypatch.setattr(runner, "fit", recorded_fit)
    data = _pairs_file(tmp_path / "pairs.jsonl", [(f"question {i}", f"answer {i}") for i in range(8)])
    run = tmp_path / "run"
    assert main(["train", "--model", "tiny", "--datasets", str(data), "--batch-size", "2", "--max-steps", "1",
                 "--stages", '[{"loss": "mnrl"}, {"loss": "mnrl", "learning_rate": 1e-5}]', "--output-dir", str(run),
                 *NO_SCORING]) == 0
    assert events == [("check", "stage-1"), ("check", "stage-2"), ("fit", "stage-1"), ("fit", "stage-2")]
    assert [json.loads((run / f"stage-{k}" / "results.json").read_text())["global_step"] for k in (1, 2)] == [1, 1]


def test_a_bad_later_stage_fails_before_the_first_trains(tmp_path, tiny_loader, monkeypatch, capsys):
    """A check only the runner made (precision) now runs for every stage up front."""
    monkeypatch.setattr(runner, "fit", lambda *a, **k: pytest.fail("stage 1 trained despite a bad stage 2"))
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    data = _pairs_file(tmp_path / "pairs.jsonl", [(f"question {i}", f"answer {i}") for i in range(8)])
    run = tmp_path / "run"
    err = _one_line_error(capsys, ["train", "--model", "tiny", "--datasets", str(data), "--batch-size", "2", "--stages",
                                   '[{"loss": "mnrl"}, {"loss": "mnrl", "mixed_precision": "fp16"}]', "--output-dir",
                                   str(run), *NO_SCORING])
    assert "stages[1].mixed_precision: 'fp16' needs a CUDA device" in err
    assert not run.exists() and tiny_loader == []


# --------------------------------------------------------------------------- 4. the saved index refuses a changed model

def test_search_refuses_an_index_built_by_a_model_one_step_away(tmp_path, tiny_loader, monkeypatch, capsys):
    corpus = tmp_path / "docs.txt"
    corpus.write_text("the cat sat\nthe dog ran\nstars at night\n")
    index = tmp_path / "index"
    argv = ["search", "--model", "tiny", "--corpus", str(corpus), "--query", "a cat", "--index", str(index)]
    assert main(argv) == 0 and main(argv) == 0  # built, then loaded by the same model
    assert f"loaded the index of 3 documents from {index}" in capsys.readouterr().out
    model = contrastive_bert.models.load_model("tiny")  # a copy of the tiny BERT (tiny_loader)
    _one_adamw_step(model)
    monkeypatch.setattr(contrastive_bert.models, "load_model", lambda *a, **k: model)
    err = _one_line_error(capsys, argv)
    assert f"model: the index at {index} was built by another model" in err and "--overwrite" in err
    assert main([*argv, "--overwrite"]) == 0 and main(argv) == 0  # rebuilt by it, then its own


def _one_adamw_step(model, learning_rate: float = 1e-5) -> None:
    """One AdamW step at a fine-tuning learning rate on a batch of two texts."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    features = getattr(model, "preprocess", model.tokenize)(["a cat sat on the mat", "stars at night"])
    loss = model(features)["sentence_embedding"].pow(2).sum()
    loss.backward()
    optimizer.step()
    model.eval()


# --------------------------------------------------------------------------- 5. search names the FAISS index it used

def test_search_with_faiss_names_the_backend_and_index(tmp_path, tiny_loader, capsys):
    pytest.importorskip("faiss")
    folder = make_beir_folder(tmp_path / "beir")
    argv = ["search", "--model", "tiny", "--corpus", str(folder), "--query", "cats", "--top-k", "2"]
    assert main([*argv, "--backend", "faiss"]) == 0
    assert "search: FAISS IndexFlatIP (exact inner product) over 8 documents" in capsys.readouterr().out.splitlines()
    assert main([*argv, "--backend", "faiss", "--index-type", "hnsw"]) == 0
    assert "search: FAISS IndexHNSWFlat (approximate) over 8 documents" in capsys.readouterr().out.splitlines()
    assert main(argv) == 0
    assert "search:" not in capsys.readouterr().out  # the default exact search, as the scores were measured


# --------------------------------------------------------------------------- 6. mining pairs says what it dropped and why

def test_mining_pairs_says_how_many_were_dropped_and_why(tmp_path, tiny_loader, capsys):
    """Each of the three most similar texts to "green tea" is a case variant of it (cosine 1, above
    its positive's score), so it is dropped; "kitten chow" scores 1 with its own positive, so any
    other text passes the filter and it keeps its negative."""
    rows = [("green tea", "a hot drink"), ("kitten chow", "Kitten Chow"),
            ("first", "Green tea"), ("second", "GREEN TEA"), ("third", "Green Tea")]
    pairs, output = _pairs_file(tmp_path / "pairs.jsonl", rows), tmp_path / "mined.jsonl"
    assert main(["mine", "--model", "tiny", "--dataset", str(pairs), "--output", str(output), "--num-negatives", "1",
                 "--range-max", "1", "--relative-margin", "0"]) == 0
    mined = {(r["anchor"], r["positive"]) for r in map(json.loads, output.read_text().splitlines())}
    assert ("kitten chow", "Kitten Chow") in mined and ("green tea", "a hot drink") not in mined
    summary = capsys.readouterr().out.splitlines()[-1]
    assert summary == (
        f"{len(mined)} of 5 (anchor, positive) pairs got 1 negative(s) each; {5 - len(mined)} dropped: no candidate among "
        "their 1 most similar texts (other than the anchor and its positives) passed the filters: a negative must score "
        "at most 100% of the positive's score (--relative-margin 0); relax those filters or raise --range-max to keep more")


def test_mining_pairs_counts_the_pairs_short_of_negatives_and_the_repeated_ones(tmp_path, tiny_loader, capsys):
    """Triplets: each pair's one candidate is the other's positive (the tiny BERT scores them 0.90,
    below 95% of a positive scoring 1), so each keeps one negative of the three asked for; a pair
    given twice is mined once (STS-B's 1,406 positive pairs hold 12 such: the "12 dropped" of issue 40)."""
    rows = [("kitten chow", "Kitten Chow"), ("green tea", "Green Tea"), ("kitten chow", "Kitten Chow")]
    pairs, output = _pairs_file(tmp_path / "pairs.jsonl", rows), tmp_path / "mined.jsonl"
    assert main(["mine", "--model", "tiny", "--dataset", str(pairs), "--output", str(output), "--num-negatives", "3"]) == 0
    assert len(output.read_text().splitlines()) == 2
    assert capsys.readouterr().out.splitlines()[-1] == (
        "0 of 2 distinct (anchor, positive) pairs got 3 negative(s) each; 2 got fewer (1 to 2); "
        "1 of the 3 pairs repeats an earlier one (same anchor and positive), mined once")


# --------------------------------------------------------------------------- 7. documents without queries: search serves them

def test_a_folder_of_documents_only_is_pointed_to_search_which_serves_it(tmp_path, tiny_loader, capsys):
    folder = tmp_path / "my docs"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n"
        for i, text in enumerate(["aspirin lowers fever", "the moon orbits the earth", "cats purr"])))
    hint = f"its documents can be searched as they are: contrastive-bert search --corpus '{folder}' --query TEXT"
    for argv in (["train", "--model", "tiny", "--datasets", str(folder), "--output-dir", str(tmp_path / "run")],
                 ["eval", "--model", "tiny", "--tasks", str(folder)]):
        err = _one_line_error(capsys, argv)
        assert f"dataset: {folder} is not a complete BEIR folder: missing queries.jsonl, qrels/<split>.tsv" in err
        assert err.rstrip("\n").endswith(hint), err
    assert tiny_loader == [] and not (tmp_path / "run").exists()

    assert main(["search", "--model", "tiny", "--corpus", str(folder), "--query", "cats purr", "--top-k", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    hits = [line.split()[2] for line in out[out.index("query: cats purr") + 1:]]
    assert sorted(hits) == ["d0", "d1", "d2"] and hits[0] == "d2"  # its own text: cosine 1


def test_early_exit_on_a_model_without_exits_says_how_to_train_them(tmp_path, tiny_model, capsys):
    tiny_model.save(str(tmp_path / "plain"))
    capsys.readouterr()  # the save's progress bar
    texts = tmp_path / "texts.txt"
    texts.write_text("hello\n")
    err = _one_line_error(capsys, ["early-exit", "--model", str(tmp_path / "plain"), "--input", str(texts)])
    assert "model: the model in" in err and "has no exit heads; train them with a cross_layer stage" in err
    err = _one_line_error(capsys, ["early-exit", "--model", "default", "--input", str(texts)])
    assert "model: expected the folder of a multi-exit model, got 'default' (not a folder)" in err
