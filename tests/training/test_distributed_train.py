"""``contrastive-bert train`` under a launcher: the work around training (clearing the folder,
``recipe.json``, mining corpus negatives, the scores before and after, ``final/``,
``results.json``) runs in the main process only; the others train on the rows it mined and write
nothing. A process no launcher started joins no process group.

The fast tests play a process other than the main one with a stand-in for accelerate's
``PartialState``; the slow ones run ``torchrun --nproc_per_node 2`` on 2 CPU processes (gloo)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from contrastive_bert.training.processes import SINGLE, WAIT_TIMEOUT, Processes, join_processes, launched
from contrastive_bert.training.recipe import TrainingRecipe

from conftest import make_beir_folder

LAUNCHER_VARIABLES = ("LOCAL_RANK", "WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


class OtherProcessState:
    """accelerate's ``PartialState`` as a process other than the main one sees it; counts its waits."""

    is_main_process = False
    num_processes = 2

    def __init__(self) -> None:
        self.waits = 0

    def wait_for_everyone(self) -> None:
        self.waits += 1

    @contextmanager
    def main_process_first(self):
        self.wait_for_everyone()  # as accelerate's: the others run the block once the main one has
        yield


@pytest.fixture()
def no_launcher(monkeypatch):
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture()
def restore_logging():
    """Put back the root level and the progress bars a process other than the main one turns off."""
    from datasets.utils import are_progress_bars_disabled, enable_progress_bars
    from transformers.utils import logging as transformers_logging

    level, datasets_bars, transformers_bars = (logging.getLogger().level, not are_progress_bars_disabled(),
                                               transformers_logging.is_progress_bar_enabled())
    yield
    logging.getLogger().setLevel(level)
    if datasets_bars:
        enable_progress_bars()
    if transformers_bars:
        transformers_logging.enable_progress_bar()


def test_a_process_no_launcher_started_is_the_only_one_and_joins_no_group(no_launcher):
    import torch.distributed

    assert not launched()
    processes = join_processes()
    assert processes is SINGLE and processes.main and processes.count == 1 and processes.state is None
    processes.wait()  # no-ops
    ran = []
    with processes.main_first():
        ran.append(1)
    assert ran == [1] and not (torch.distributed.is_available() and torch.distributed.is_initialized())


@pytest.mark.parametrize("variable, value", [("LOCAL_RANK", "0"), ("WORLD_SIZE", "2"), ("PMI_SIZE", "4")])
def test_a_launcher_is_read_off_the_environment(no_launcher, monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    assert launched()


def test_a_launched_process_joins_as_the_trainer_would_and_logs_warnings_only(no_launcher, monkeypatch, restore_logging):
    import accelerate
    from datasets.utils import are_progress_bars_disabled

    made = []

    class FakePartialState(OtherProcessState):
        def __init__(self, cpu: bool = False, **kwargs) -> None:
            super().__init__()
            made.append({"cpu": cpu, **kwargs})

    monkeypatch.setattr(accelerate, "PartialState", FakePartialState)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")
    logging.getLogger().setLevel(logging.INFO)
    processes = join_processes()
    assert made == [{"cpu": True, "timeout": WAIT_TIMEOUT}]
    assert (processes.main, processes.count) == (False, 2)
    assert logging.getLogger().level == logging.WARNING and are_progress_bars_disabled()
    with processes.main_first():
        assert processes.state.waits == 1  # waited for the main process before the block
    processes.wait()
    assert processes.state.waits == 2


def test_processes_that_could_not_train_together_are_refused(no_launcher, monkeypatch):
    """torchrun on CPUs without ACCELERATE_USE_CPU: accelerate finds no device, so each process would train alone."""
    import accelerate

    class Alone(OtherProcessState):
        is_main_process, num_processes = True, 1

        def __init__(self, cpu: bool = False, **kwargs) -> None:
            super().__init__()

    monkeypatch.setattr(accelerate, "PartialState", Alone)
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"launcher: started as 2 processes .* set ACCELERATE_USE_CPU=true"):
        join_processes()


def _retrieval_recipe(folder: Path, run: Path, **fields) -> TrainingRecipe:
    values = dict(model="tiny", datasets=[str(folder)], loss="mnrl", output_dir=str(run), batch_size=1, max_steps=2,
                  dev_task=None, eval_tasks=[str(folder)], save_steps=100, logging_steps=1, seed=0,
                  corpus_negatives={"num_negatives": 1, "perc_pos": None})
    return TrainingRecipe(**{**values, **fields})


def test_another_process_trains_on_the_main_ones_mined_rows_and_writes_nothing(tmp_path, tiny_loader, monkeypatch):
    """The main process ran first (here: a plain run); a process other than the main one, given
    --overwrite, clears nothing, mines and scores nothing, reads the mined rows and trains on them,
    and leaves every file of the run as it was."""
    import contrastive_bert.corpus_mining
    from contrastive_bert.training import runner

    folder = make_beir_folder(tmp_path / "corpus")
    run = tmp_path / "run"
    first = runner.train(_retrieval_recipe(folder, run))
    assert first.main_process and first.after and (run / "mined" / "0" / "report.json").is_file()
    (run / "notes.txt").write_text("mine")
    kept = {path: path.read_bytes() for path in (run / "recipe.json", run / "results.json", run / "scores_before.json",
                                                 run / "final" / "model.safetensors", run / "mined" / "0" / "report.json")}

    state = OtherProcessState()
    monkeypatch.setattr(runner, "join_processes", lambda: Processes(main=False, count=2, state=state))

    def never(*args, **kwargs):
        raise AssertionError("a process other than the main one mined or scored")

    monkeypatch.setattr(contrastive_bert.corpus_mining, "mine_corpus_negatives", never)
    monkeypatch.setattr(runner, "evaluate_recipe_tasks", never)
    outcome = runner.train(_retrieval_recipe(folder, run, overwrite=True))

    assert not outcome.main_process and outcome.before == {} and outcome.after == {}
    assert [entry["step"] for entry in outcome.log_history if "loss" in entry] == [1, 2]  # it trained
    assert state.waits == 2  # after the checks, and before reading the mined rows
    assert all(path.read_bytes() == content for path, content in kept.items()), "a file of the run changed"
    assert (run / "notes.txt").read_text() == "mine"


def test_rows_missing_from_the_store_are_an_error_not_a_second_mining(tmp_path, tiny_model):
    from contrastive_bert.training.corpus_negatives import (
        CorpusNegatives,
        mine_training_rows,
    )
    from contrastive_bert.training.train_data import RunData

    folder = make_beir_folder(tmp_path / "corpus")
    with pytest.raises(RuntimeError, match="holds no rows mined with these settings"):
        mine_training_rows(tiny_model, [str(folder)], CorpusNegatives(), RunData().__getitem__,
                           store=tmp_path / "mined", mine=False)


# --- torchrun on 2 CPU processes -------------------------------------------------------------------


def _torchrun(arguments: list[str], tmp_path: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "ACCELERATE_USE_CPU": "true"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "contrastive_bert.cli", "train", *arguments]
    try:
        result = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
                                check=False)
    except subprocess.TimeoutExpired as error:  # a hang (a barrier one process never reaches) is a failure
        pytest.fail(f"torchrun timed out: {error.stderr}")
    assert result.returncode == 0, result.stderr[-6000:]
    return result


def _old_run(run: Path) -> None:
    """An earlier run of this package in ``run`` (what --overwrite removes) and a file of the user's (what it keeps)."""
    (run / "checkpoints" / "checkpoint-5").mkdir(parents=True)
    (run / "final").mkdir()
    (run / "recipe.json").write_text('{"old": true}\n')
    (run / "results.json").write_text('{"old": true}\n')
    (run / "notes.txt").write_text("mine")


@pytest.mark.slow
def test_torchrun_two_processes_one_run_written_by_the_main_process(_tiny_model_session, tmp_path):
    """queue_infonce (its queue all-gathered) on corpus negatives of a toy retrieval set, over an
    earlier run with --overwrite: one clearing, one mining, one set of scores, one report."""
    from sentence_transformers import SentenceTransformer

    _tiny_model_session.save(str(tmp_path / "tiny"))
    folder = make_beir_folder(tmp_path / "corpus")
    run = tmp_path / "run"
    _old_run(run)
    result = _torchrun(["--datasets", str(folder), "--model", str(tmp_path / "tiny"), "--loss", "queue_infonce",
                        "--loss-options", '{"queue_size": 8}', "--batch-size", "2", "--max-steps", "2", "--dev-task", "",
                        "--save-steps", "100", "--logging-steps", "1", "--output-dir", str(run), "--overwrite"], tmp_path)

    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "final", "mined", "notes.txt", "recipe.json",
                                                     "results.json", "scores_before.json"]
    assert (run / "notes.txt").read_text() == "mine"  # the user's file: kept
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["checkpoint-2"]  # the old checkpoint-5: removed
    recipe = json.loads((run / "recipe.json").read_text())
    assert recipe["loss"] == "queue_infonce" and recipe["max_steps"] == 2
    results = json.loads((run / "results.json").read_text())
    assert results["global_step"] == 2 and results["recipe"] == recipe
    task = str(folder)
    assert set(results["before"]) == set(results["after"]) == {task}
    assert results["corpus_negatives"]["mining"][task]["kept"] == 6  # every train pair mined once, by the main process
    assert [p.name for p in (run / "mined").iterdir()] == ["0"]  # the untrained model's corpus embeddings: removed
    model = SentenceTransformer(str(run / "final"), device="cpu")
    assert model.encode(["what about cats?"]).shape == (1, 32)

    err = result.stderr
    assert err.count("overwrite: removed checkpoints, final, recipe.json, results.json") == 1
    assert err.count("mining with the model about to be trained") == 1 and "rows mined before, read from" not in err
    assert err.count(f"{task} test: main_score") == 2  # before and after, by the main process only
    assert result.stdout.count("model saved to") == 1 and result.stdout.count("before     after") == 1


@pytest.mark.slow
def test_torchrun_two_processes_staged_run(tmp_path, shared_data):
    """The multi-exit recipe's two stages: stage 2 starts from the stage-1 model the main process saved."""
    import yaml
    from conftest import REPO_ROOT, build_tiny_model

    build_tiny_model(tmp_path / "build", num_layers=6).save(str(tmp_path / "tiny6"))
    values = yaml.safe_load((REPO_ROOT / "scripts" / "recipes" / "banking77_multi_exit.yaml").read_text())
    for stage in values["stages"]:
        stage["max_steps"] = 2
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump({**values, "save_steps": 100}))
    run = tmp_path / "run"
    run.mkdir()
    (run / "stage-1").mkdir()
    (run / "stage-1" / "old.txt").write_text("an earlier stage")
    (run / "notes.txt").write_text("mine")
    result = _torchrun(["--recipe", str(tmp_path / "recipe.yaml"), "--model", str(tmp_path / "tiny6"), "--data-dir",
                        str(shared_data), "--output-dir", str(run), "--max-train-samples", "64", "--batch-size", "8",
                        "--max-seq-length", "16", "--max-eval-samples", "40", "--overwrite"], tmp_path)

    assert sorted(p.name for p in run.iterdir()) == ["final", "notes.txt", "recipe.json", "results.json", "stage-1", "stage-2"]
    assert not (run / "stage-1" / "old.txt").exists()
    results = json.loads((run / "results.json").read_text())
    assert [s["recipe"]["loss"] for s in results["stages"]] == ["acl", "cross_layer"]
    assert [s["global_step"] for s in results["stages"]] == [2, 2]
    assert results["stages"][0]["before"] and results["stages"][0]["after"] and results["multi_exit"]["rows"] == 40
    assert json.loads((run / "stage-2" / "recipe.json").read_text())["model"] == str(run / "stage-1" / "final")
    assert result.stderr.count("stage 2: training") == 1 and result.stdout.count("model saved to") == 1
