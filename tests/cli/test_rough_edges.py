"""Rough edges a new user meets (issue 40), through ``cli.main`` with the tiny BERT: a run that would
train nothing is an error, not "model saved"; ``train --datasets <retrieval set>`` records its recipe
before mining and ``--resume`` reuses finished mining; ``eval --max-eval-samples`` caps the scored
rows and says so; a bad row of a data file names the file; mining shows its progress."""

from __future__ import annotations

import json
import shutil

import pytest

import contrastive_bert.corpus_mining as corpus_mining
import contrastive_bert.training.runner as runner
from contrastive_bert.cli import main
from contrastive_bert.data.custom import load_custom_dataset

from conftest import make_beir_folder

NO_SCORING = ["--max-eval-samples", "0", "--dev-task", "", "--logging-steps", "1", "--save-steps", "100"]


def _repeated_queries_folder(folder):
    """A BEIR folder whose 20 training queries hold only 7 distinct texts (each with its own document)."""
    folder.mkdir()
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "", "text": f"document number {i}"}) + "\n" for i in range(22)))
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": f"question {i % 7}" if i < 20 else f"held-out question {i}"}) + "\n"
        for i in range(22)))
    (folder / "qrels").mkdir()
    header = "query-id\tcorpus-id\tscore\n"
    (folder / "qrels" / "train.tsv").write_text(header + "".join(f"q{i}\td{i}\t1\n" for i in range(20)))
    (folder / "qrels" / "dev.tsv").write_text(header + "q20\td20\t1\n")  # a dev split: no train query carved off
    (folder / "qrels" / "test.tsv").write_text(header + "q21\td21\t1\n")
    return folder


# --------------------------------------------------------------------------- 1. zero optimizer steps

@pytest.mark.parametrize("negatives", ["none", '{"num_negatives": 1, "perc_pos": null}'])
def test_too_few_distinct_texts_for_one_batch_is_refused_before_training(tmp_path, tiny_loader, monkeypatch, capsys,
                                                                          negatives):
    """20 rows, 7 distinct queries, batch 16: MNRL's no-duplicates sampler can make no batch. The
    pairs are refused before the model loads; mined rows once mined, before anything trains."""
    folder = _repeated_queries_folder(tmp_path / "repeats")
    run = tmp_path / "run"
    trained = []
    monkeypatch.setattr(runner, "fit", lambda *args, **kwargs: trained.append(1))
    assert main(["train", "--datasets", str(folder), "--model", "tiny", "--batch-size", "16", "--output-dir", str(run),
                 "--corpus-negatives", negatives, *NO_SCORING]) == 2
    captured = capsys.readouterr()
    error = [line for line in captured.err.splitlines() if "error:" in line]
    assert len(error) == 1 and "Traceback" not in captured.err
    assert "20 training rows but only 7 distinct 'anchor' texts, too few distinct texts for one batch of 16" in error[0]
    assert "lower --batch-size (to 7 at most) or add data" in error[0]
    assert "model saved" not in captured.out and not trained and not (run / "final").exists()
    assert tiny_loader == ([] if negatives == "none" else ["tiny"])  # plain pairs: refused before the model loads


def test_a_run_of_zero_optimizer_steps_exits_non_zero_without_a_model(tmp_path, tiny_loader, capsys):
    """Each row shares a text with each other row: every column has enough distinct texts, yet the
    no-duplicates sampler yields no batch of 2, so the trainer stops at step 0. That is an error."""
    data = tmp_path / "cycle.jsonl"
    data.write_text("".join(json.dumps({"anchor": f"text {i}", "positive": f"text {(i + 1) % 3}"}) + "\n" for i in range(3)))
    run = tmp_path / "run"
    assert main(["train", "--datasets", str(data), "--model", "tiny", "--loss", "mnrl", "--batch-size", "2",
                 "--eval-tasks", "", "--output-dir", str(run), *NO_SCORING]) == 2
    captured = capsys.readouterr()
    error = [line for line in captured.err.splitlines() if "error:" in line]
    assert len(error) == 1 and "Traceback" not in captured.err
    assert "training made 0 optimizer steps: 3 training rows gave no full batch of 2 (--batch-size)" in error[0]
    assert "no-duplicates batch sampler" in error[0] and "lower --batch-size or add data" in error[0]
    assert "model saved" not in captured.out
    assert not (run / "final").exists() and not (run / "results.json").exists()


def test_fit_refuses_zero_steps(tmp_path, tiny_model):
    import datasets

    from contrastive_bert.training import TrainingRecipe
    from contrastive_bert.training.losses_registry import get_loss_entry

    rows = datasets.Dataset.from_dict({"anchor": ["a", "b", "c"], "positive": ["b", "c", "a"]})
    recipe = TrainingRecipe(model="tiny", datasets=["rows"], loss="mnrl", batch_size=2, save_steps=100)
    entry = get_loss_entry("mnrl")
    with pytest.raises(runner.NothingTrained, match="training made 0 optimizer steps"):
        runner.fit(tiny_model, rows, entry.build(tiny_model, rows, recipe), recipe, str(tmp_path / "checkpoints"),
                   batch_sampler=entry.batch_sampler)


# --------------------------------------------------------------------------- 2. mining, then resume

class _CountingMiner:
    """Wraps the corpus miner: counts its calls per training query set, interrupts chosen calls."""

    def __init__(self, interrupt_calls: tuple[int, ...] = ()) -> None:
        self.calls: list[str] = []
        self.interrupt_calls = interrupt_calls
        self.mine = corpus_mining.mine_corpus_negatives

    def __call__(self, model, data, *args, **kwargs):
        self.calls.append(min(data.queries.values()))
        if len(self.calls) in self.interrupt_calls:
            raise KeyboardInterrupt
        return self.mine(model, data, *args, **kwargs)


def _two_corpora(tmp_path):
    first = make_beir_folder(tmp_path / "first")
    second = make_beir_folder(tmp_path / "second")
    (second / "queries.jsonl").write_text((second / "queries.jsonl").read_text().replace("what about", "tell me about"))
    return first, second


def test_ctrl_c_while_mining_keeps_the_recipe_and_resume_mines_only_what_was_left(tmp_path, tiny_loader, monkeypatch,
                                                                                 capsys):
    first, second = _two_corpora(tmp_path)
    run = tmp_path / "run"
    miner = _CountingMiner(interrupt_calls=(2,))  # Ctrl-C while the second data set is mined
    monkeypatch.setattr(corpus_mining, "mine_corpus_negatives", miner)
    argv = ["train", "--datasets", f"{first},{second}", "--model", "tiny", "--loss", "mnrl", "--batch-size", "1",
            "--max-steps", "2", "--output-dir", str(run), *NO_SCORING]
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert json.loads((run / "recipe.json").read_text())["datasets"] == [str(first), str(second)]  # recorded first
    assert (f"contrastive-bert train: interrupted (Ctrl-C) before the first checkpoint was saved; the mined rows of "
            f"1 data set are kept in {run / 'mined'}; continue with: contrastive-bert train --output-dir {run} --resume"
            ) in err.splitlines()
    assert miner.calls == ["what about birds?", "tell me about birds?"]

    assert main(["train", "--output-dir", str(run), "--resume"]) == 0
    assert miner.calls == ["what about birds?", "tell me about birds?", "tell me about birds?"]  # the first: read back
    results = json.loads((run / "results.json").read_text())
    mining = results["corpus_negatives"]["mining"]
    assert mining[str(first)]["read_from"] == str(run / "mined" / "0") and "read_from" not in mining[str(second)]
    assert mining[str(first)]["kept"] == 6 and results["train_rows"] == 6 + mining[str(second)]["kept"]
    assert results["global_step"] == 2 and (run / "final" / "modules.json").is_file()


def test_a_run_stopped_after_mining_resumes_on_the_mined_rows(tmp_path, tiny_loader, monkeypatch, capsys):
    folder = make_beir_folder(tmp_path / "corpus")
    run = tmp_path / "run"
    miner = _CountingMiner()
    monkeypatch.setattr(corpus_mining, "mine_corpus_negatives", miner)
    fit = runner.fit

    def interrupted_fit(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "fit", interrupted_fit)
    argv = ["train", "--datasets", str(folder), "--model", "tiny", "--batch-size", "1", "--max-steps", "2",
            "--output-dir", str(run), *NO_SCORING]
    assert main(argv) == 130
    assert f"the mined rows of 1 data set are kept in {run / 'mined'}" in capsys.readouterr().err
    mined = json.loads((run / "mined" / "0" / "report.json").read_text())
    assert mined["settings"]["dataset"] == str(folder) and mined["report"]["kept"] == 6

    monkeypatch.setattr(runner, "fit", fit)
    assert main(["train", "--output-dir", str(run), "--resume"]) == 0
    assert len(miner.calls) == 1  # mined once, in the first run
    results = json.loads((run / "results.json").read_text())
    assert results["global_step"] == 2 and results["corpus_negatives"]["mining"][str(folder)]["kept"] == 6

    assert main(argv + ["--overwrite"]) == 0  # --overwrite starts afresh: the kept rows go, mining runs again
    assert len(miner.calls) == 2


def test_a_run_stopped_before_its_first_checkpoint_reads_its_scores_before_back(tmp_path, tiny_loader, monkeypatch):
    """--resume of a run stopped after mining and scoring the untrained model, before its first checkpoint,
    reads the before-scores back instead of encoding the corpus again (minutes on a real one); resumed
    with another --max-eval-samples it scores other rows, so it scores the untrained model again."""
    folder = make_beir_folder(tmp_path / "corpus")
    run = tmp_path / "run"
    fit = runner.fit

    def interrupted_fit(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "fit", interrupted_fit)
    argv = ["train", "--datasets", str(folder), "--model", "tiny", "--batch-size", "1", "--max-steps", "2",
            "--output-dir", str(run), "--dev-task", "", "--save-steps", "100"]
    assert main(argv) == 130
    scored = json.loads((run / "scores_before.json").read_text())
    assert list(scored) == [str(folder)] and 0 <= scored[str(folder)]["main_score"] <= 100
    marked = {str(folder): {**scored[str(folder)], "main_score": 12.345}}  # no scoring gives it: read back, or not

    def stop_before_the_end():
        for name in ("results.json", "final", "checkpoints"):
            target = run / name
            if target.is_file():
                target.unlink()
            elif target.exists():
                shutil.rmtree(target)
        (run / "scores_before.json").write_text(json.dumps(marked))

    stop_before_the_end()
    monkeypatch.setattr(runner, "fit", fit)
    assert main(["train", "--output-dir", str(run), "--resume"]) == 0
    results = json.loads((run / "results.json").read_text())
    assert results["global_step"] == 2 and results["before"][str(folder)]["main_score"] == 12.345

    stop_before_the_end()
    assert main(["train", "--output-dir", str(run), "--resume", "--max-eval-samples", "1"]) == 0
    rescored = json.loads((run / "results.json").read_text())["before"][str(folder)]["main_score"]
    assert rescored != 12.345 and 0 <= rescored <= 100


def test_mining_inside_train_shows_its_progress_unless_quiet(tmp_path, tiny_loader, monkeypatch, capsys):
    for variable in ("TQDM_DISABLE", "HF_DATASETS_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS"):
        monkeypatch.setenv(variable, "")  # -q sets them for the process; restored after this test
    folder = make_beir_folder(tmp_path / "corpus")
    argv = ["train", "--datasets", str(folder), "--model", "tiny", "--batch-size", "1", "--max-steps", "1", *NO_SCORING]
    assert main([*argv, "--output-dir", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert f"corpus negatives of {folder}: mining with the model about to be trained" in err
    assert "Batches" in err and "Searching 8 documents" in err  # encoding and search bars
    assert main(["-q", *argv, "--output-dir", str(tmp_path / "b")]) == 0
    err = capsys.readouterr().err
    assert "Batches" not in err and "Searching" not in err


# --------------------------------------------------------------------------- 3. eval --max-eval-samples

def test_eval_caps_retrieval_queries_and_says_so(tmp_path, tiny_loader, capsys):
    folder = make_beir_folder(tmp_path / "corpus")
    header = "query-id\tcorpus-id\tscore\n"
    (folder / "qrels" / "test.tsv").write_text(header + "".join(f"q{i}\td{i}\t1\n" for i in range(8)))
    output = tmp_path / "scores.json"
    assert main(["eval", "--model", "tiny", "--tasks", str(folder), "--max-eval-samples", "3",
                 "--output", str(output)]) == 0
    out = capsys.readouterr().out
    assert (f"{folder}: --max-eval-samples 3: scored on 3 of its 8 test queries, searched over the whole corpus "
            "(8 documents)") in out.splitlines()
    scores = json.loads(output.read_text())[str(folder)]
    assert scores["num_queries"] == 3 and scores["num_documents"] == 8
    assert main(["eval", "--model", "tiny", "--tasks", str(folder), "--max-eval-samples", "8"]) == 0
    assert "--max-eval-samples" not in capsys.readouterr().out  # nothing cut, nothing said


def test_eval_caps_rows_of_other_tasks(tmp_path, tiny_loader, capsys):
    data = tmp_path / "sts.jsonl"
    data.write_text("".join(json.dumps({"sentence1": f"a {i}", "sentence2": f"b {i}", "score": i / 10}) + "\n"
                            for i in range(10)))
    output = tmp_path / "scores.json"
    assert main(["eval", "--model", "tiny", "--tasks", str(data), "--max-eval-samples", "4", "--output", str(output)]) == 0
    assert f"{data}: --max-eval-samples 4: scored on 4 of its 10 test rows" in capsys.readouterr().out.splitlines()
    assert json.loads(output.read_text())[str(data)]["num_pairs"] == 4


def test_capped_splits_read_from_one_file_stay_one_split():
    """A file data set's splits are one object (the classifier refuses to fit on its test rows):
    capping keeps them one."""
    import datasets

    from contrastive_bert.evaluation.tasks import cap_rows

    rows = datasets.Dataset.from_dict({"text": [str(i) for i in range(6)], "label": [0, 1] * 3})
    other = rows.select(range(4))
    capped = cap_rows({"train": rows, "test": rows, "validation": other}, 3)
    assert capped["train"] is capped["test"] and len(capped["test"]) == 3 and capped["validation"] is not capped["test"]


def test_eval_max_eval_samples_errors(capsys):
    assert main(["eval", "--model", "tiny", "--mteb", "--max-eval-samples", "3"]) == 2
    assert "--max-eval-samples: not with --mteb" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--max-eval-samples", "0"])
    assert exit_info.value.code == 2
    assert "--max-eval-samples: expected a positive integer, got 0" in capsys.readouterr().err


# --------------------------------------------------------------------------- 4. a bad row names its file

def test_a_bad_row_of_a_custom_file_names_the_file(tmp_path):
    data = tmp_path / "my_scores.csv"
    data.write_text("sentence1,sentence2,score\na,b,4.0\n")
    with pytest.raises(ValueError, match=rf"score: row 0 of {data} is 4.0, expected a value in \[0, 1\]"):
        load_custom_dataset(data, "pair-score")
    labels = tmp_path / "my_pairs.jsonl"
    labels.write_text(json.dumps({"sentence1": "a", "sentence2": "b", "label": 2}) + "\n")
    with pytest.raises(ValueError, match=f"label: row 0 of {labels} is 2, expected 0 or 1"):
        load_custom_dataset(labels, "pair-binary")


def test_train_on_a_file_with_a_bad_row_names_the_file(tmp_path, tiny_loader, capsys):
    data = tmp_path / "my_scores.csv"
    data.write_text("sentence1,sentence2,score\na,b,0.5\nc,d,3.0\n")
    assert main(["train", "--datasets", str(data), "--model", "tiny", "--loss", "cosent", "--eval-tasks", "",
                 "--output-dir", str(tmp_path / "run"), *NO_SCORING]) == 2
    err = capsys.readouterr().err
    assert f"score: row 1 of {data.resolve()} is 3.0, expected a value in [0, 1]" in err and "of split" not in err
