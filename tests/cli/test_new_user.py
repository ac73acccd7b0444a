"""What a new user met (issue 21), each through ``cli.main`` with the tiny BERT and tiny files: a
mistyped local model path, a data file smaller than one batch, ``--resume`` on a finished run,
Ctrl-C / SIGTERM during training, a file with unknown columns, a run without eval tasks, the
saved model card of a model with this package's heads, and the help text."""

from __future__ import annotations

import argparse
import os
import signal
import time

import pytest
from transformers import TrainerCallback

import contrastive_bert.training.runner as runner
from contrastive_bert.cli import build_cli, main


def _code(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exit_info:  # argparse usage errors
        return exit_info.code


@pytest.fixture()
def tiny_run(shared_data):
    """Flags of a tiny run: the tiny BERT (see tiny_loader), 2 steps, no evaluation."""
    return ["--model", "tiny", "--datasets", "stsb", "--loss", "mnrl", "--batch-size", "4", "--max-seq-length", "16",
            "--max-train-samples", "24", "--max-steps", "4", "--save-steps", "2", "--logging-steps", "1",
            "--dev-task", "", "--eval-tasks", "", "--data-dir", str(shared_data)]


# --------------------------------------------------------------------------- 2. a mistyped local model path

@pytest.mark.parametrize("argv", [
    ["train", "--model", "output/nope", "--datasets", "stsb", "--output-dir", "run"],
    ["eval", "--model", "output/nope", "--tasks", "stsb"],
    ["classify", "--model", "output/acll", "--input", "texts.txt"],
    ["mine", "--model", "output/nope", "--dataset", "stsb", "--output", "mined.jsonl"],
    ["early-exit", "--model", "output/nope/final", "--input", "texts.txt"],
])
def test_a_mistyped_local_model_path_is_one_line_before_anything_loads(argv, tmp_path, monkeypatch, capsys, shared_data):
    """``output/`` exists here, so ``output/nope`` is a local folder that is not there, not a hub id
    (no 78 s of hub retries): one line, exit 2, in well under the time a model takes to load."""
    import contrastive_bert.models

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONTRASTIVE_BERT_DATA", str(shared_data))
    (tmp_path / "output").mkdir()
    (tmp_path / "texts.txt").write_text("hello\n")
    monkeypatch.setattr(contrastive_bert.models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    start = time.perf_counter()
    assert _code(argv) == 2
    err = capsys.readouterr().err
    assert time.perf_counter() - start < 20
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"model: local path '{argv[2]}' does not exist" in err
    assert not (tmp_path / "run").exists() and not (tmp_path / "mined.jsonl").exists()


def test_what_looks_local():
    from contrastive_bert.models import looks_local

    assert looks_local("./model") and looks_local("../x") and looks_local("/abs/path") and looks_local("a/b/final")
    assert looks_local("my-run/final")  # a run's final/ folder, even when my-run/ is not here
    assert not looks_local("sentence-transformers/all-MiniLM-L6-v2")  # no local folder sentence-transformers/
    assert not looks_local("all-MiniLM-L6-v2")


# --------------------------------------------------------------------------- 3. fewer rows than one batch

def test_a_data_file_smaller_than_one_batch_is_refused_before_training(tmp_path, tiny_loader, capsys):
    data = tmp_path / "tiny.csv"
    data.write_text("anchor,positive\na cat,a kitten\na dog,a puppy\nthe sun,a star\n")
    run = tmp_path / "run"
    code = _code(["train", "--model", "tiny", "--datasets", str(data), "--batch-size", "8", "--dev-task", "",
                  "--eval-tasks", "", "--output-dir", str(run)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"datasets: {data} gives 3 training rows, fewer than one batch of 8 (--batch-size)" in err
    assert not run.exists() and tiny_loader == []  # refused before the model loaded, nothing written


# --------------------------------------------------------------------------- 4. --resume on a finished run

def test_resume_of_a_finished_run_rewrites_nothing(tmp_path, tiny_run, tiny_loader, capsys):
    run = tmp_path / "run"
    assert main(["train", *tiny_run, "--output-dir", str(run)]) == 0
    stamps = {p: p.stat().st_mtime_ns for p in [run / "results.json", run / "recipe.json", *(run / "final").rglob("*")]}
    checkpoints = sorted(p.name for p in (run / "checkpoints").iterdir())
    capsys.readouterr()
    assert main(["train", "--output-dir", str(run), "--resume"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"already finished: the run in {run} trained its 4 steps; nothing was rewritten")
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == checkpoints
    assert len(tiny_loader) == 1  # the resume loaded no model


# --------------------------------------------------------------------------- 5. Ctrl-C and SIGTERM

class _StopAt(TrainerCallback):
    """At ``step``, what a user or a scheduler does: Ctrl-C (KeyboardInterrupt) or ``kill`` (SIGTERM)."""

    def __init__(self, step: int, how: str) -> None:
        self.step, self.how = step, how

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            if self.how == "sigint":
                raise KeyboardInterrupt
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.parametrize("how, code, said", [("sigint", 130, "interrupted (Ctrl-C)"), ("sigterm", 143, "terminated (SIGTERM)")])
def test_a_stopped_run_names_its_checkpoint_and_the_resume_command(how, code, said, tmp_path, tiny_run, tiny_loader,
                                                                   monkeypatch, capsys):
    run = tmp_path / "run"
    plain = runner.loss_callbacks
    monkeypatch.setattr(runner, "loss_callbacks", lambda loss, checkpoint=None: plain(loss, checkpoint) + [_StopAt(3, how)])
    handler = signal.getsignal(signal.SIGTERM)
    assert main(["train", *tiny_run, "--output-dir", str(run)]) == code
    assert signal.getsignal(signal.SIGTERM) == handler  # restored
    err = capsys.readouterr().err  # progress bars above it, then the one line
    checkpoint = run / "checkpoints" / "checkpoint-2"
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert (f"contrastive-bert train: {said}; last checkpoint {checkpoint}; continue with: "
            f"contrastive-bert train --output-dir {run} --resume") in err.splitlines()
    assert not (run / "final").exists()
    monkeypatch.setattr(runner, "loss_callbacks", plain)
    assert main(["train", "--output-dir", str(run), "--resume"]) == 0  # the command it printed works
    assert (run / "final" / "modules.json").is_file()


def test_a_run_stopped_before_its_first_checkpoint_says_so(tmp_path, tiny_run, tiny_loader, monkeypatch, capsys):
    plain = runner.loss_callbacks
    monkeypatch.setattr(runner, "loss_callbacks", lambda loss, checkpoint=None: plain(loss, checkpoint) + [_StopAt(1, "sigint")])
    assert main(["train", *tiny_run, "--output-dir", str(tmp_path / "run")]) == 130
    assert "before the first checkpoint was saved; nothing to resume" in capsys.readouterr().err


# --------------------------------------------------------------------------- 6. unknown columns

@pytest.mark.parametrize("header", ["foo,bar", "foo,bar,baz"])
def test_a_file_with_unknown_columns_is_refused_naming_the_expected_ones(header, tmp_path, no_model_loaded, capsys):
    data = tmp_path / "data.csv"
    data.write_text(header + "\n" + "\n".join(",".join(["x"] * len(header.split(","))) for _ in range(8)) + "\n")
    assert _code(["train", "--model", "tiny", "--datasets", str(data), "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"cannot tell the format from the columns {header.split(',')}" in err
    assert "pairs (anchor, positive)" in err and "labelled (text, label)" in err
    assert not (tmp_path / "run").exists()


@pytest.fixture()
def no_model_loaded(monkeypatch):
    import contrastive_bert.models

    monkeypatch.setattr(contrastive_bert.models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))


# --------------------------------------------------------------------------- 7. no eval tasks, --max-eval-samples

def test_a_run_without_eval_tasks_prints_no_empty_table(tmp_path, tiny_run, tiny_loader, capsys):
    assert main(["train", *tiny_run, "--max-steps", "2", "--output-dir", str(tmp_path / "run")]) == 0
    lines = capsys.readouterr().out.splitlines()  # the trainer's log lines, then ours
    assert lines[-2:] == ["no before/after scores (no --eval-tasks, or --max-eval-samples 0)",
                          f"model saved to {tmp_path / 'run'}/final; scores in {tmp_path / 'run'}/results.json"]
    assert not any(line.startswith("task") for line in lines)  # no table header over nothing


def test_max_eval_samples_cuts_the_eval_tasks(tmp_path, tiny_run, tiny_loader, monkeypatch, capsys):
    """--max-eval-samples N: every split of every eval task cut to N shuffled rows (the same rows
    before and after); 0 skips the evaluation."""
    import contrastive_bert.evaluation.tasks as tasks

    seen = []
    real = tasks.evaluate_tasks
    monkeypatch.setattr(tasks, "evaluate_tasks", lambda model, names, **kw: seen.append(
        {n: {s: len(d) for s, d in kw["data"][n].items()} for n in names}) or real(model, names, **kw))
    assert main(["train", *tiny_run, "--max-steps", "2", "--eval-tasks", "mrpc", "--max-eval-samples", "30",
                 "--output-dir", str(tmp_path / "run")]) == 0
    assert len(seen) == 2 and seen[0] == seen[1] and set(seen[0]["mrpc"].values()) == {30}
    assert main(["train", *tiny_run, "--max-steps", "2", "--eval-tasks", "mrpc", "--max-eval-samples", "0",
                 "--output-dir", str(tmp_path / "skipped")]) == 0
    assert len(seen) == 2 and "no before/after scores" in capsys.readouterr().out


# --------------------------------------------------------------------------- 8. the model card of a model with our heads

def test_the_saved_model_card_shows_the_lines_that_load_it(tmp_path, tiny_loader, shared_data, capsys):
    from sentence_transformers import SentenceTransformer

    from contrastive_bert.heads.label_embedding import LabelEmbeddingClassifier

    run = tmp_path / "acl"
    assert main(["train", "--model", "tiny", "--datasets", "emotion", "--loss", "acl", "--batch-size", "8",
                 "--max-train-samples", "48", "--max-steps", "2", "--max-seq-length", "16", "--dev-task", "",
                 "--eval-tasks", "", "--data-dir", str(shared_data), "--output-dir", str(run)]) == 0
    card = (run / "final" / "README.md").read_text()
    assert 'model = SentenceTransformer("sentence_transformers_model_id", trust_remote_code=True)' in card
    assert "from contrastive_bert.models import load_model" in card and "`LabelEmbeddingClassifier`" in card
    assert card.count("<!-- contrastive_bert: how to load -->") == 1
    with pytest.raises(ValueError, match="trust_remote_code"):  # what the card warns about
        SentenceTransformer(str(run / "final"), device="cpu", local_files_only=True)
    loaded = SentenceTransformer(str(run / "final"), device="cpu", local_files_only=True, trust_remote_code=True)
    assert isinstance(loaded[-1], LabelEmbeddingClassifier)


def test_a_plain_model_card_is_left_alone(tmp_path, tiny_model):
    from contrastive_bert.training.model_card import note_custom_modules

    tiny_model.save(str(tmp_path / "m"))
    before = (tmp_path / "m" / "README.md").read_text()
    assert note_custom_modules(tmp_path / "m") is False
    assert (tmp_path / "m" / "README.md").read_text() == before


# --------------------------------------------------------------------------- 9. help text

def _subparser(name: str) -> argparse.ArgumentParser:
    return next(a for a in build_cli()._actions if a.dest == "command").choices[name]


def test_every_train_flag_has_a_help_sentence():
    for action in _subparser("train")._actions:
        if not action.option_strings or action.dest == "help":
            continue
        text = action.help.split(" (default:")[0]
        name = action.option_strings[-1].lstrip("-").replace("-", " ")
        assert len(text.split()) >= 3 and text.lower() != name, (action.option_strings, text)


@pytest.mark.parametrize("command", ["train", "eval", "mine", "classify", "early-exit"])
def test_help_is_consistent(command):
    parser = _subparser(command)
    text = " ".join(parser.format_help().split())
    for python_style in ("(default: False)", "(default: True)", "(default: None)"):
        assert python_style not in text
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS or action.dest == "help":
            continue
        assert action.help, action.option_strings  # every visible flag explains itself
        if action.nargs != 0 and not action.choices:  # takes a value: an upper-case metavar, never the dest
            assert action.metavar and action.metavar.upper() == action.metavar, (command, action.option_strings)


def test_one_name_for_the_row_limit():
    """--max-samples wherever a command reads one data set; train has --max-train-samples and
    --max-eval-samples; early-exit's old --max-examples still parses, hidden."""
    flags = {name: {f for a in _subparser(name)._actions for f in a.option_strings} for name in ("mine", "early-exit", "train")}
    assert "--max-samples" in flags["mine"] and "--max-samples" in flags["early-exit"]
    assert {"--max-train-samples", "--max-eval-samples"} <= flags["train"]
    assert "--max-examples" not in _subparser("early-exit").format_help()
    args = build_cli().parse_args(["early-exit", "--model", "m", "--sweep", "--max-examples", "7"])
    assert args.max_samples == 7
    help_text = " ".join(_subparser("early-exit").format_help().split())
    assert "--device DEVICE torch device" in help_text and "--split SPLIT sweep:" in help_text


def test_ctrl_c_in_another_subcommand_is_one_line(monkeypatch, capsys, shared_data):
    import contrastive_bert.models

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(contrastive_bert.models, "load_model", interrupted)
    assert main(["eval", "--model", "tiny", "--tasks", "stsb", "--data-dir", str(shared_data)]) == 130
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "contrastive-bert eval: interrupted (Ctrl-C)" and "Traceback" not in err
