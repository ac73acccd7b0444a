"""Adapting a model to a corpus as a user walks it (issue 30), through ``cli.main`` with the tiny BERT:
``train --datasets <retrieval set>`` with no other flag is dev-scored and evaluated on that set at
the model's full length in a folder named after it; explicit flags and recipe fields win;
``--max-eval-samples`` caps queries, never the corpus; a retrieval set is loaded once per run."""

from __future__ import annotations

import copy
import json

import pytest

from contrastive_bert.cli import build_cli, main
from contrastive_bert.cli.train import recipe_from_args

from conftest import make_beir_folder

TINY_MAX_SEQ_LENGTH = 32  # the tiny BERT's own limit (tests/conftest.py)


def _recipe(argv: list[str]):
    """The recipe ``contrastive-bert train ARGV`` would run (no data or model loaded)."""
    return recipe_from_args(build_cli().parse_args(["train", *argv]))


TINY_STEP = ["--model", "tiny", "--loss", "mnrl", "--batch-size", "4", "--max-train-samples", "8", "--max-steps", "1",
             "--save-steps", "1"]


# --------------------------------------------------------------------------- defaults from the data

def test_a_registry_retrieval_set_is_its_own_dev_and_eval_task(tmp_path, shared_data, tiny_loader, monkeypatch, capsys):
    """``train --datasets scifact`` (plus only a tiny budget and no scoring): the recorded recipe names
    SciFact as dev and eval task, the model's full length and output/scifact-mnrl."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--datasets", "scifact", "--data-dir", str(shared_data), *TINY_STEP, "--max-eval-samples", "0"]) == 0
    recorded = json.loads((tmp_path / "output" / "scifact-mnrl" / "recipe.json").read_text())
    assert recorded["dev_task"] == "scifact" and recorded["eval_tasks"] == ["scifact"]
    assert recorded["max_seq_length"] == TINY_MAX_SEQ_LENGTH  # the model's own limit, not STS-B's 128
    assert recorded["output_dir"] == "output/scifact-mnrl"
    out = capsys.readouterr().out
    assert "model saved to output/scifact-mnrl/final" in out
    assert ("search with it: contrastive-bert search --model output/scifact-mnrl/final --corpus scifact "
            "--index output/scifact-mnrl/index --query 'your question'") in out


def test_a_beir_folder_is_its_own_dev_and_eval_task(tmp_path, tiny_loader, monkeypatch, capsys):
    """A user's BEIR folder, no recipe: dev nDCG@10 on its dev judgements during training, test
    nDCG@10 before and after, a folder named after it."""
    folder = make_beir_folder(tmp_path / "my_corpus")
    monkeypatch.chdir(tmp_path)
    # the toy corpus is too small to mine (triplets of 8 documents leave no batch without a repeated
    # text): plain pairs here; the derived corpus negatives are tested in test_corpus_negatives.py
    assert main(["train", "--datasets", str(folder), *TINY_STEP, "--eval-steps", "1", "--corpus-negatives", "none"]) == 0
    run = tmp_path / "output" / "my_corpus-mnrl"
    recorded = json.loads((run / "recipe.json").read_text())
    assert recorded["dev_task"] == str(folder) and recorded["eval_tasks"] == [str(folder)]
    assert recorded["max_seq_length"] == TINY_MAX_SEQ_LENGTH and recorded["output_dir"] == "output/my_corpus-mnrl"
    results = json.loads((run / "results.json").read_text())
    for moment in ("before", "after"):
        scores = results[moment][str(folder)]
        assert scores["main_score"] == scores["ndcg_at_10"] and scores["num_documents"] == 8 and scores["num_queries"] == 1
    state = json.loads((run / "checkpoints" / "checkpoint-1" / "trainer_state.json").read_text())
    assert any("eval_my_corpus-dev_main_score" in entry for entry in state["log_history"])  # the dev task ran
    out = capsys.readouterr().out
    assert str(folder) in out and "model saved to output/my_corpus-mnrl/final" in out


def test_flags_and_recipe_fields_win_over_the_derived_values(tmp_path, shared_data):
    flags = _recipe(["--datasets", "scifact", "--dev-task", "stsb", "--eval-tasks", "stsb,scifact", "--max-seq-length", "64",
                     "--output-dir", "runs/mine"])
    assert (flags.dev_task, flags.eval_tasks, flags.max_seq_length, flags.output_dir) == ("stsb", ["stsb", "scifact"], 64, "runs/mine")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("datasets: [scifact]\ndev_task: null\nmax_seq_length: 200\n")
    from_file = _recipe(["--recipe", str(recipe)])
    assert from_file.dev_task is None and from_file.max_seq_length == 200  # given in the file
    assert from_file.eval_tasks == ["scifact"] and from_file.output_dir == "output/scifact-mnrl"  # derived
    assert _recipe(["--recipe", str(recipe), "--dev-task", "scifact"]).dev_task == "scifact"  # a flag over the file


@pytest.mark.parametrize("argv, dev, evals, length, folder", [
    ([], "stsb", ["stsb"], 128, "output/stsb-mnrl"),  # the defaults as before
    (["--datasets", "stsb,mrpc", "--loss", "cosent"], "stsb", ["stsb"], 128, "output/stsb+mrpc-cosent"),  # pairs keep STS-B
    (["--datasets", "banking77", "--loss", "acl"], "banking77", ["banking77"], 128, "output/banking77-acl"),  # its accuracy
    (["--datasets", "nfcorpus,stsb"], "nfcorpus", ["nfcorpus", "stsb"], None, "output/nfcorpus+stsb-mnrl"),
])
def test_what_each_kind_of_data_derives(argv, dev, evals, length, folder):
    recipe = _recipe(argv)
    assert (recipe.dev_task, recipe.eval_tasks, recipe.max_seq_length, recipe.output_dir) == (dev, evals, length, folder)


def test_a_labelled_file_keeps_sts_b_it_has_no_held_out_rows(tmp_path):
    data = tmp_path / "tickets.csv"
    data.write_text("text,label\n" + "".join(f"ticket {i},{i % 2}\n" for i in range(8)))
    recipe = _recipe(["--datasets", str(data), "--loss", "acl"])
    assert (recipe.dev_task, recipe.eval_tasks, recipe.output_dir) == ("stsb", ["stsb"], "output/tickets-acl")


# --------------------------------------------------------------------------- --max-eval-samples and one load per run

def test_max_eval_samples_caps_queries_never_the_corpus(tmp_path, shared_data, tiny_loader, _tiny_model_session, capsys):
    """The capped score is the full-corpus score of the same queries: every SciFact document is
    searched, only N test queries are scored."""
    from contrastive_bert.data import load_dataset
    from contrastive_bert.data.beir import RetrievalData
    from contrastive_bert.evaluation.beir_evaluation import evaluate_retrieval_splits

    run = tmp_path / "run"
    assert main(["train", "--datasets", "scifact", "--data-dir", str(shared_data), *TINY_STEP, "--dev-task", "",
                 "--max-eval-samples", "5", "--output-dir", str(run)]) == 0
    before = json.loads((run / "results.json").read_text())["before"]["scifact"]
    data = RetrievalData.from_splits(load_dataset("scifact", data_dir=str(shared_data)))
    assert before["num_documents"] == len(data.corpus) == 5183 and before["num_queries"] == 5
    chosen = data.with_queries_capped(5).qrels["test"]
    assert len(chosen) == 5 and all(data.qrels["test"][q] == docs for q, docs in chosen.items())
    untrained = copy.deepcopy(_tiny_model_session)  # what "before" scored
    full_corpus = evaluate_retrieval_splits(untrained, RetrievalData(data.corpus, data.queries, {"test": chosen}), batch_size=64)["test"]
    assert full_corpus["num_documents"] == 5183
    assert before["main_score"] == pytest.approx(full_corpus["main_score"], abs=1e-4)
    assert before["map_at_100"] == pytest.approx(full_corpus["map_at_100"], abs=1e-4)


def test_a_retrieval_set_is_loaded_once_per_run(tmp_path, tiny_loader, monkeypatch, capsys):
    """Training pairs, the dev evaluator (run at every step) and the scores before and after share
    one reading of the files and one corpus structure."""
    import contrastive_bert.data.beir as beir
    import contrastive_bert.data.loading as loading

    folder = make_beir_folder(tmp_path / "my_corpus")
    reads, built = [], []
    real_local, real_splits = loading.load_local, beir.RetrievalData.from_splits.__func__
    monkeypatch.setattr(loading, "load_local", lambda spec, path: reads.append(spec.name) or real_local(spec, path))
    monkeypatch.setattr(beir.RetrievalData, "from_splits", classmethod(lambda cls, data: built.append(1) or real_splits(cls, data)))
    # batch 1: mined triplets of the toy corpus repeat a negative within 4 rows (no batch of 4 would train)
    assert main(["train", "--datasets", str(folder), *TINY_STEP, "--batch-size", "1", "--max-steps", "3", "--eval-steps", "1",
                 "--output-dir", str(tmp_path / "run")]) == 0
    assert reads == [str(folder)] and len(built) == 1


# --------------------------------------------------------------------------- mine: one meaning of --num-negatives, a run to watch

@pytest.mark.parametrize("dataset", ["beir_folder", "stsb"])
def test_num_negatives_means_the_same_on_every_data_set(dataset, tmp_path, shared_data, tiny_loader, capsys):
    """``--num-negatives 2``: two rows of one negative per pair in the triplet format (as
    sentence-transformers' miner writes on a pair set), two negative columns in n-tuple."""
    from collections import Counter

    name = str(make_beir_folder(tmp_path / "my_corpus")) if dataset == "beir_folder" else "stsb"
    base = ["mine", "--dataset", name, "--data-dir", str(shared_data), "--model", "tiny", "--num-negatives", "2",
            "--relative-margin", "0", "--max-samples", "12"]
    triplets, tuples = tmp_path / "triplets.jsonl", tmp_path / "tuples.jsonl"
    assert main([*base, "--output", str(triplets)]) == 0
    rows = [json.loads(line) for line in triplets.read_text().splitlines()]
    assert rows and set(rows[0]) == {"anchor", "positive", "negative"}
    per_pair = Counter((row["anchor"], row["positive"]) for row in rows)
    assert max(per_pair.values()) == 2  # a retrieval set: every kept pair; a pair set: those with 2 candidates left
    if dataset == "beir_folder":
        assert set(per_pair.values()) == {2}
        assert all(len({r["negative"] for r in rows if (r["anchor"], r["positive"]) == pair}) == 2 for pair in per_pair)
    assert main([*base, "--output", str(tuples), "--output-format", "n-tuple"]) == 0
    rows = [json.loads(line) for line in tuples.read_text().splitlines()]
    assert rows and set(rows[0]) == {"anchor", "positive", "negative_1", "negative_2"}


def test_mining_a_corpus_shows_progress_and_what_was_dropped(tmp_path, tiny_loader, capsys):
    folder = make_beir_folder(tmp_path / "my_corpus")
    # q0 judged relevant to six of the eight documents (five in test): two unjudged left, fewer than 3 negatives
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq7\td7\t1\n" + "".join(f"q0\td{i}\t1\n" for i in range(1, 6)))
    mined = tmp_path / "mined.jsonl"
    assert main(["mine", "--dataset", str(folder), "--model", "tiny", "--num-negatives", "3", "--relative-margin", "0",
                 "--output", str(mined)]) == 0
    out, err = capsys.readouterr()
    assert "mine: encoding the 8 documents of the corpus" in err and "mine: encoding the 6 train queries" in err
    assert "Searching 8 documents" in err  # the search's progress bar
    kept = len(mined.read_text().splitlines()) // 3  # triplets: three rows per kept pair
    summary = out.splitlines()[-1]
    assert summary.startswith(f"{kept} of 6 (query, relevant document) pairs kept 3 negative(s) each")
    assert "1 dropped: the corpus holds fewer than 3 unjudged documents for their query within --range-max" in summary
    if kept < 5:  # the rest: candidates above the positive's score (random tiny model)
        assert (f"{5 - kept} dropped: among their 100 most similar unjudged documents fewer than 3 score at most the "
                "positive's score (--relative-margin 0 drops near-positives") in summary


def test_resume_without_output_dir_finds_the_derived_folder(tmp_path, shared_data, tiny_loader, monkeypatch, capsys):
    folder = make_beir_folder(tmp_path / "my_corpus")
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--datasets", str(folder), *TINY_STEP, "--max-steps", "2", "--corpus-negatives", "none"]) == 0
    capsys.readouterr()
    assert main(["train", "--datasets", str(folder), "--resume"]) == 0
    assert "already finished: the run in output/my_corpus-mnrl trained its 2 steps" in capsys.readouterr().out
