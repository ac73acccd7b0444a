"""``contrastive-bert`` handlers without a subprocess: ``build_cli().parse_args`` and ``main``
return codes; every bad-input error exits 2 with a message before any model is loaded."""

from __future__ import annotations

import json

import pytest
import yaml

import contrastive_bert.models
from contrastive_bert.cli import COMMANDS, build_cli, main
from contrastive_bert.cli.evaluate import format_results
from contrastive_bert.cli.train import format_before_after, recipe_from_args


@pytest.fixture()
def no_model(monkeypatch):
    """Fail the test if any handler gets as far as loading a model."""

    def load_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(contrastive_bert.models, "load_model", load_model)


def _error(capsys, argv) -> str:
    """The one-line error of a failing command (a usage error exits through argparse, same format)."""
    try:
        code = main(argv)
    except SystemExit as exit_info:
        code = exit_info.code
    assert code == 2
    captured = capsys.readouterr()
    command = "eval" if argv[0] == "eval" else argv[0]
    assert captured.err.startswith(f"contrastive-bert {command}: error: ")
    return captured.err


# --------------------------------------------------------------------------- parser


def test_help_lists_commands(capsys):
    parser = build_cli()
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    subcommands = next(a for a in parser._actions if a.dest == "command").choices
    assert {"train", "eval"} <= set(subcommands) and len(subcommands) == len(COMMANDS)
    for command in subcommands:
        assert command in out


def test_train_help_lists_every_recipe_field(capsys):
    from contrastive_bert.training import TrainingRecipe

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for name in TrainingRecipe.field_names():
        assert "--" + name.replace("_", "-") in out


def test_no_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2
    assert "COMMAND" in capsys.readouterr().err


def test_parse_train_flags():
    args = build_cli().parse_args([
        "train", "--model", "m", "--datasets", "stsb, mrpc", "--loss", "cosent", "--batch-size", "8",
        "--learning-rate", "3e-5", "--epochs", "2", "--max-seq-length", "64", "--loss-options", '{"scale": 20}',
        "--dev-task", "", "--eval-tasks", "stsb,banking77", "--overwrite", "--no-gradient-checkpointing",
    ])
    assert args.func.__name__ == "run_train" and args.recipe is None
    recipe = recipe_from_args(args)
    assert recipe.model == "m" and recipe.datasets == ["stsb", "mrpc"] and recipe.loss == "cosent"
    assert recipe.batch_size == 8 and recipe.learning_rate == 3e-5 and recipe.epochs == 2.0
    assert recipe.max_seq_length == 64 and recipe.loss_options == {"scale": 20}
    assert recipe.dev_task is None and recipe.eval_tasks == ["stsb", "banking77"]
    assert recipe.overwrite is True and recipe.gradient_checkpointing is False
    # flags not given keep the recipe defaults
    assert recipe.seed == 42 and recipe.resume is False


@pytest.mark.parametrize(("typed", "meant"), [("evaluate", "eval"), ("trian", "train"), ("early_exit", "early-exit"),
                                              ("predict", "classify")])
def test_an_unknown_command_names_the_one_meant(capsys, typed, meant):
    with pytest.raises(SystemExit) as exit_info:
        main([typed])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("contrastive-bert: error: argument COMMAND: invalid choice")
    assert f"Did you mean '{meant}'?" in err


def test_an_unrelated_command_gets_no_guess(capsys):
    with pytest.raises(SystemExit):
        main(["frobnicate"])
    assert "Did you mean" not in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "meant"), [
    (["train", "--lr", "1e-5"], "--learning-rate"),  # the Trainer's name
    (["train", "--max_steps", "5"], "--max-steps"),  # underscores, as in TrainingArguments
    (["train", "--num_train_epochs=2"], "--epochs"),
    (["eval", "--bs", "4"], "--batch-size"),
    (["search", "--corpus", "scifact", "--top-n", "3"], "--top-k"),  # a near miss
])
def test_an_unknown_flag_is_reported_by_its_subcommand_with_the_flag_meant(capsys, argv, meant):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"contrastive-bert {argv[0]}: error: unrecognized arguments: {' '.join(argv[-2 if '=' not in argv[-1] else -1:])}")
    assert err.endswith(f". Did you mean '{meant}'? (see contrastive-bert {argv[0]} --help)\n")


def test_an_unrelated_flag_gets_no_guess_and_a_flag_of_another_subcommand_is_not_offered(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--frobnicate"])
    assert capsys.readouterr().err == ("contrastive-bert train: error: unrecognized arguments: --frobnicate "
                                       "(see contrastive-bert train --help)\n")
    with pytest.raises(SystemExit):
        main(["eval", "--top-k", "3"])  # search's flag, not eval's
    assert "Did you mean" not in capsys.readouterr().err


def test_parse_bad_flag_type(capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_cli().parse_args(["train", "--batch-size", "many"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == ("contrastive-bert train: error: argument --batch-size: expected a positive integer, got 'many' "
                   "(see contrastive-bert train --help)\n")  # one line, no usage text


def test_parse_eval_flags():
    args = build_cli().parse_args(["eval", "--tasks", "stsb,mrpc", "--data-dir", "d", "--output", "o.json"])
    assert args.func.__name__ == "run_eval"
    assert (args.model, args.tasks, args.data_dir, args.output, args.split, args.batch_size, args.overwrite) == (
        "default", ["stsb", "mrpc"], "d", "o.json", "test", 64, False)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_recipe_file_with_cli_overrides(tmp_path, suffix):
    values = {"model": "from-file", "loss": "cosent", "datasets": ["mrpc"], "batch_size": 16, "learning_rate": 5.0e-5,
              "eval_tasks": ["stsb"], "seed": 3}
    path = tmp_path / f"recipe{suffix}"
    path.write_text(json.dumps(values) if suffix == ".json" else yaml.safe_dump(values))
    recipe = recipe_from_args(build_cli().parse_args(["train", "--recipe", str(path), "--batch-size", "4", "--datasets", "stsb"]))
    assert recipe.batch_size == 4 and recipe.datasets == ["stsb"]  # the flags win
    assert recipe.model == "from-file" and recipe.loss == "cosent" and recipe.seed == 3 and recipe.learning_rate == 5e-5


# --------------------------------------------------------------------------- train: errors before any model


def test_train_errors(tmp_path, shared_data, capsys, no_model):
    base = ["train", "--data-dir", str(shared_data), "--output-dir", str(tmp_path / "run")]
    assert "loss: unknown loss 'mnlr'" in _error(capsys, base + ["--loss", "mnlr"])
    assert "Did you mean 'stsb'" in _error(capsys, base + ["--datasets", "stsbb"])
    err = _error(capsys, base + ["--loss", "cosent", "--datasets", "banking77"])
    assert "'banking77' is a classification data set, but this loss trains on scored_pairs" in err
    assert "--batch-size: expected a positive integer, got 0" in _error(capsys, base + ["--batch-size", "0"])
    assert "warmup_ratio: expected a value in [0, 1)" in _error(capsys, base + ["--warmup-ratio", "1.5"])
    assert "unknown data set 'emotions'" in _error(capsys, base + ["--eval-tasks", "stsb,emotions"])
    assert "overwrite, resume: choose one" in _error(capsys, base + ["--overwrite", "--resume"])
    assert "resume: " in _error(capsys, base + ["--resume"]) and not (tmp_path / "run").exists()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text("{}")
    assert "already exists and is not empty; pass --overwrite" in _error(capsys, base)
    assert "resume: no checkpoint-* folder under" in _error(capsys, base + ["--resume"])
    err = _error(capsys, ["train", "--data-dir", str(tmp_path / "nowhere"), "--output-dir", str(tmp_path / "r2")])
    assert "is not a directory" in err or "data_dir" in err


def test_train_recipe_file_errors(tmp_path, capsys, no_model):
    path = tmp_path / "recipe.yaml"
    path.write_text("lr: 0.001\n")
    assert "recipe: unknown field 'lr'" in _error(capsys, ["train", "--recipe", str(path)])
    assert "recipe: file not found" in _error(capsys, ["train", "--recipe", str(tmp_path / "missing.yaml")])
    path.write_text("loss: cosent\ndatasets: [answer_selection]\n")
    err = _error(capsys, ["train", "--recipe", str(path), "--output-dir", str(tmp_path / "run")])
    assert "'answer_selection' is a reranking data set" in err


def test_train_runs_from_a_recipe_file(tmp_path, shared_data, capsys, tiny_loader):
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({
        "model": "tiny", "datasets": ["stsb"], "loss": "mnrl", "max_steps": 100, "batch_size": 8, "learning_rate": 1e-3,
        "max_train_samples": 48, "dev_task": "stsb", "eval_tasks": ["stsb"], "logging_steps": 1, "save_steps": 2,
        "output_dir": str(tmp_path / "ignored"),
    }))
    run = tmp_path / "run"
    code = main(["train", "--recipe", str(path), "--max-steps", "2", "--output-dir", str(run), "--dev-task", "",
                 "--eval-tasks", "answer_selection", "--data-dir", str(shared_data)])
    assert code == 0
    assert tiny_loader == ["tiny"]
    out = capsys.readouterr().out
    assert "answer_selection" in out and f"model saved to {run}/final" in out
    results = json.loads((run / "results.json").read_text())
    assert results["global_step"] == 2 and results["recipe"]["dev_task"] is None
    assert set(results["before"]) == set(results["after"]) == {"answer_selection"}
    assert not (tmp_path / "ignored").exists()


# --------------------------------------------------------------------------- eval


def test_eval_errors(tmp_path, shared_data, capsys, no_model):
    assert "unknown data set 'stsbb'" in _error(capsys, ["eval", "--tasks", "stsbb"])
    assert "tasks: expected at least one task name" in _error(capsys, ["eval", "--tasks", " , "])
    assert "--batch-size: expected a positive integer, got 0" in _error(capsys, ["eval", "--batch-size", "0"])
    assert "data_dir: " in _error(capsys, ["eval", "--data-dir", str(tmp_path / "nowhere")])
    existing = tmp_path / "scores.json"
    existing.write_text("{}")
    err = _error(capsys, ["eval", "--data-dir", str(shared_data), "--output", str(existing)])
    assert f"--output: {existing} already exists; pass --overwrite to replace it" in err
    assert existing.read_text() == "{}"
    assert "model: expected 'default'" in _error(capsys, ["eval", "--model", " "])


def test_eval_writes_json(tmp_path, shared_data, capsys, tiny_loader):
    output = tmp_path / "out" / "scores.json"
    argv = ["eval", "--model", "tiny", "--tasks", "answer_selection,mrpc", "--split", "validation",
            "--data-dir", str(shared_data), "--output", str(output), "--batch-size", "128"]
    assert main(argv) == 0
    results = json.loads(output.read_text())
    assert set(results) == {"answer_selection", "mrpc"}
    assert {"main_score", "mrr", "map"} <= set(results["answer_selection"])
    assert results["mrpc"]["num_pairs"] == 500
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["task", "main_score", "other", "metrics"]
    assert f"{results['mrpc']['main_score']:.2f}" in out
    # an existing output is replaced only with --overwrite
    output.write_text("{}")
    assert main(argv + ["--overwrite"]) == 0
    assert set(json.loads(output.read_text())) == {"answer_selection", "mrpc"}
    assert tiny_loader == ["tiny", "tiny"]


# --------------------------------------------------------------------------- tables


def test_format_tables():
    table = format_before_after({"stsb": {"main_score": 80.0}}, {"stsb": {"main_score": 82.5}, "mrpc": {"main_score": 60.0}})
    lines = table.splitlines()
    assert lines[0].split() == ["task", "before", "after", "change"]
    assert lines[1].split() == ["stsb", "80.00", "82.50", "+2.50"]
    assert lines[2].split() == ["mrpc", "nan", "60.00"]
    table = format_results({"stsb": {"main_score": 82.034, "cosine_pearson": 84.5, "num_pairs": 1379}})
    assert table.splitlines()[1].split() == ["stsb", "82.03", "cosine_pearson=84.50"]


# --------------------------------------------------------------------------- one vocabulary


def _help(command: str) -> str:
    parser = build_cli()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    return subparsers[command].format_help() if command else parser.format_help()


@pytest.mark.parametrize("command", ["", "train", "eval", "mine", "classify", "early-exit"])
def test_help_defaults_are_clean(command):
    text = " ".join(_help(command).split())  # undo line wrapping
    assert "['" not in text and "(default: None)" not in text and "==SUPPRESS==" not in text
    assert "hub) (default" not in text  # the data-dir default said once
    assert "``" not in text  # no raw markup


def test_shared_flags_read_the_same_everywhere():
    spelled = {}
    for command in ("train", "eval", "mine", "classify"):
        parser = next(a for a in build_cli()._actions if a.dest == "command").choices[command]
        for action in parser._actions:
            for flag in action.option_strings:
                spelled.setdefault(flag, {})[command] = action
    assert {"--model", "--batch-size", "--overwrite", "--verbose", "--quiet"} <= {
        f for f, where in spelled.items() if len(where) == 4}
    assert spelled["--data-dir"]["train"].help == spelled["--data-dir"]["eval"].help == spelled["--data-dir"]["mine"].help
    assert set(spelled["--output-dir"]) == {"train", "mine"} and set(spelled["--output"]) == {"eval", "mine", "classify"}
    assert spelled["--output"]["eval"].metavar == "FILE" and spelled["--output-dir"]["train"].metavar == "DIR"
    assert "--datasets" in spelled and set(spelled["--dataset"]) == {"mine"} and set(spelled["--tasks"]) == {"eval"}
    assert spelled["--mixed-precision"]["train"].choices == ("no", "fp16", "bf16", "auto")


def test_classify_follows_the_overwrite_rule(tmp_path, capsys, no_model):
    texts = tmp_path / "texts.txt"
    texts.write_text("hello\n")
    existing = tmp_path / "labels.jsonl"
    existing.write_text("old\n")
    err = _error(capsys, ["classify", "--labels", "a,b", "--input", str(texts), "--output", str(existing)])
    assert f"--output: {existing} already exists; pass --overwrite to replace it" in err
    assert existing.read_text() == "old\n"


def test_mine_follows_the_overwrite_rule_for_files_and_folders(tmp_path, capsys, no_model):
    (tmp_path / "mined").mkdir()
    (tmp_path / "mined.jsonl").write_text("{}\n")
    err = _error(capsys, ["mine", "--dataset", "stsb", "--output-dir", str(tmp_path / "mined")])
    assert "--output-dir: " in err and "already exists; pass --overwrite" in err
    assert "--output: " in _error(capsys, ["mine", "--dataset", "stsb", "--output", str(tmp_path / "mined.jsonl")])
    assert "use --output-dir for a folder" in _error(capsys, ["mine", "--dataset", "stsb", "--output", str(tmp_path / "new")])


@pytest.mark.parametrize("flag, level", [([], "INFO"), (["--verbose"], "DEBUG"), (["-q"], "ERROR")])
def test_verbosity_configures_logging_once(flag, level, tmp_path, capsys, no_model):
    import logging

    before = logging.getLogger().level
    try:
        _error(capsys, ["eval", *flag, "--tasks", "stsbb"])
        assert logging.getLogger().level == getattr(logging, level)
    finally:
        logging.getLogger().setLevel(before)
    handlers = [h for h in logging.getLogger().handlers if type(h).__name__ == "_StderrHandler"]
    assert len(handlers) == 1


def test_help_imports_no_heavy_library():
    """--help stays fast: torch, transformers, datasets... are imported only when a subcommand runs."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "contrastive_bert.cli", "--help"],
                            capture_output=True, text=True, check=True)
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "train" in result.stdout and "contrastive_bert" in imported
    assert not imported & {"torch", "transformers", "sentence_transformers", "datasets", "mteb", "faiss", "numpy", "yaml"}
