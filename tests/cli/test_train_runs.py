"""``contrastive-bert train`` end to end through ``cli.main`` with the tiny BERT: resume continues
the recorded run, bad loss options fail fast and write nothing, a diverging run fails loudly,
``--overwrite`` removes exactly this package's artefacts."""

from __future__ import annotations

import json
import math
import time

import pytest
from transformers import TrainerCallback

import contrastive_bert.models
import contrastive_bert.training.runner as runner
from contrastive_bert.cli import main


class Interrupted(Exception):
    """Stands for a killed process (Ctrl-C, pre-emption) in the middle of training."""


class InterruptAt(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise Interrupted(f"stopped at step {state.global_step}")


def _strict_json(path):
    """Parse as strict JSON: NaN / Infinity are not JSON."""
    def refuse(constant):
        raise AssertionError(f"{path} holds {constant}")
    return json.loads(path.read_text(), parse_constant=refuse)


def _run(argv, capsys=None) -> int:
    try:
        return main(argv)
    except SystemExit as exit_info:
        return exit_info.code


@pytest.fixture()
def run_args(shared_data):
    """A tiny run whose recipe differs from the defaults in loss, options, batch size and length."""
    return ["--model", "tiny", "--datasets", "stsb", "--loss", "cosent", "--loss-options", '{"scale": 10}',
            "--batch-size", "4", "--max-seq-length", "32", "--max-train-samples", "40", "--learning-rate", "1e-3",
            "--max-steps", "6", "--save-steps", "2", "--logging-steps", "1", "--dev-task", "",
            "--eval-tasks", "mrpc", "--data-dir", str(shared_data)]


def test_bare_resume_continues_the_recorded_run(tmp_path, run_args, tiny_loader, monkeypatch, capsys):
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert main(["train", *run_args, "--output-dir", str(whole)]) == 0

    plain_callbacks = runner.loss_callbacks
    monkeypatch.setattr(runner, "loss_callbacks", lambda loss, checkpoint=None: plain_callbacks(loss, checkpoint) + [InterruptAt(3)])
    with pytest.raises(Interrupted):
        main(["train", *run_args, "--output-dir", str(parts)])
    monkeypatch.setattr(runner, "loss_callbacks", plain_callbacks)
    assert sorted(p.name for p in (parts / "checkpoints").iterdir()) == ["checkpoint-2"]
    assert not (parts / "final").exists() and not (parts / "results.json").exists()

    assert main(["train", "--output-dir", str(parts), "--resume"]) == 0  # bare: everything else from recipe.json
    a, b = _strict_json(whole / "results.json"), _strict_json(parts / "results.json")
    assert b["global_step"] == a["global_step"] == 6
    for key in ("loss", "loss_options", "batch_size", "max_seq_length", "datasets", "max_train_samples", "learning_rate"):
        assert b["recipe"][key] == a["recipe"][key], key
    assert b["before"] == a["before"]  # read back from scores_before.json, not recomputed
    # Same weights at the end: the resumed run restored optimizer, scheduler, RNG and data order.
    assert b["after"]["mrpc"]["main_score"] == pytest.approx(a["after"]["mrpc"]["main_score"], abs=1e-6)
    weights_a, weights_b = _weights(whole / "final"), _weights(parts / "final")
    assert weights_a.keys() == weights_b.keys() and len(weights_a) > 10
    assert max(float((weights_a[k] - weights_b[k]).abs().max()) for k in weights_a) < 1e-6
    assert tiny_loader == ["tiny"] * 3


def _weights(folder):
    """Every tensor saved under a model folder, keyed by file and name."""
    from safetensors.torch import load_file

    return {f"{path.relative_to(folder)}:{name}": tensor
            for path in sorted(folder.rglob("*.safetensors")) for name, tensor in load_file(str(path)).items()}


def test_resume_refuses_a_conflicting_flag_and_logs_an_allowed_one(tmp_path, run_args, tiny_loader, capsys, caplog):
    run = tmp_path / "run"
    assert main(["train", *run_args, "--max-steps", "2", "--output-dir", str(run)]) == 0
    recorded = (run / "recipe.json").read_text()
    capsys.readouterr()
    assert _run(["train", "--output-dir", str(run), "--resume", "--loss", "mnrl"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("contrastive-bert train: error: loss: the run in ") and "recorded with 'cosent', got 'mnrl'" in err
    assert _run(["train", "--output-dir", str(run), "--resume", "--batch-size", "8"]) == 2
    assert "batch_size: the run in" in capsys.readouterr().err
    assert (run / "recipe.json").read_text() == recorded  # a refused resume changes nothing
    caplog.set_level("INFO", logger="contrastive_bert.training.runner")
    assert main(["train", "--output-dir", str(run), "--resume", "--max-steps", "4"]) == 0
    assert "resume: max_steps changed from 2 to 4" in caplog.text
    assert _strict_json(run / "results.json")["global_step"] == 4


BAD_OPTIONS = [
    ("mnrl", {"scael": 20}, "loss_options.scael: unknown option of loss 'mnrl' (did you mean 'scale'?)"),
    ("mnrl", {"scale": 0}, "loss_options.scale: expected a positive number, got 0"),
    ("cached_mnrl", {"mini_batch_size": 0}, "loss_options.mini_batch_size: expected a positive integer, got 0"),
    ("cosent", {"similarity_fct": "cos"}, "loss_options.similarity_fct"),
    ("queue_infonce", {"temprature": 0.05}, "loss_options.temprature: unknown option of loss 'queue_infonce' (did you mean 'temperature'?)"),
    ("queue_infonce", {"temperature": 0}, "loss_options.temperature"),
    ("queue_infonce", {"queue_size": 0}, "loss_options.queue_size"),
    ("queue_infonce", {"queue_size": 4, "num_hard_negatives": 8}, "loss_options.num_hard_negatives"),
    ("acl", {"temperature": -1}, "loss_options.temperature"),
    ("acl", {"contrastive_weight": -0.5}, "loss_options.contrastive_weight"),
]


@pytest.mark.parametrize("loss, options, message", BAD_OPTIONS, ids=[f"{l}-{next(iter(o))}" for l, o, _ in BAD_OPTIONS])
def test_bad_loss_option_fails_fast_and_writes_nothing(tmp_path, shared_data, monkeypatch, capsys, loss, options, message):
    def no_work(*args, **kwargs):
        raise AssertionError("data or a model was loaded before the loss options were checked")

    monkeypatch.setattr(contrastive_bert.models, "load_model", no_work)
    monkeypatch.setattr("contrastive_bert.training.train_data.build_train_dataset", no_work)
    datasets = "banking77" if loss == "acl" else "stsb"
    out = tmp_path / "run"
    argv = ["train", "--loss", loss, "--loss-options", json.dumps(options), "--datasets", datasets,
            "--eval-tasks", datasets, "--dev-task", "", "--data-dir", str(shared_data), "--output-dir", str(out)]
    start = time.perf_counter()
    code = _run(argv)
    seconds = time.perf_counter() - start
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert seconds < 5, f"{seconds:.1f} s"
    assert not out.exists()


@pytest.mark.parametrize("argv, message", [
    (["--loss-options", "{scale: 20}"], "--loss-options: expected a JSON object such as"),
    (["--loss-options", "[1, 2]"], "--loss-options: expected a JSON object such as"),
    (["--model", "./no/such/model"], "model: local path './no/such/model' does not exist"),
    (["--mixed-precision", "fp8"], "argument --mixed-precision: invalid choice: 'fp8'"),
])
def test_other_bad_input_is_one_line_and_writes_nothing(tmp_path, shared_data, monkeypatch, capsys, argv, message):
    monkeypatch.setattr(contrastive_bert.models, "load_model", lambda *a, **k: pytest.fail("model loaded"))
    out = tmp_path / "run"
    assert _run(["train", "--data-dir", str(shared_data), "--output-dir", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "usage:" not in err, err
    assert not out.exists()


def test_diverging_run_fails_with_the_step_and_saves_no_final(tmp_path, run_args, tiny_loader, capsys):
    run = tmp_path / "run"
    argv = ["train", *run_args, "--learning-rate", "1e6", "--max-grad-norm", "0", "--max-steps", "8", "--output-dir", str(run)]
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the log lines: the one-line error
    assert err.startswith("contrastive-bert train: error: training: diverged at step ") and "nothing saved as final/" in err, err
    step = int(err.split("diverged at step ")[1].split()[0])
    assert 1 <= step <= 8
    assert not (run / "final").exists() and not (run / "results.json").exists()
    saved = sorted(int(p.name.split("-")[1]) for p in (run / "checkpoints").glob("checkpoint-*")) if (run / "checkpoints").exists() else []
    assert all(s < step for s in saved)  # no checkpoint of the broken weights
    if saved:
        assert f"last finite checkpoint: {run / 'checkpoints' / f'checkpoint-{saved[-1]}'}" in err
    for path in run.rglob("*.json"):
        _strict_json(path)


def test_overwrite_removes_only_this_packages_artefacts(tmp_path, run_args, tiny_loader):
    run = tmp_path / "run"
    assert main(["train", *run_args, "--max-steps", "2", "--output-dir", str(run)]) == 0
    (run / "stage-1").mkdir()
    (run / "notes.txt").write_text("mine")
    (run / "checkpoints" / "stale.txt").write_text("old run")
    assert main(["train", *run_args, "--max-steps", "2", "--output-dir", str(run), "--overwrite", "--eval-tasks", ""]) == 0
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "final", "notes.txt", "recipe.json", "results.json", "scores_before.json"]
    assert not (run / "checkpoints" / "stale.txt").exists()
    assert _strict_json(run / "scores_before.json") == {}  # the new run's, not the old one's
    assert math.isfinite(_strict_json(run / "results.json")["train_seconds"])


def test_bad_option_of_a_baseline_loss_fails_fast_in_a_fresh_process(tmp_path):
    """As a user runs it: a new process, nothing imported yet. The error comes before torch, transformers
    or sentence-transformers load (what makes it fast; read from ``-X importtime``, not timed, so a
    busy machine cannot fail it)."""
    import subprocess
    import sys

    out = tmp_path / "run"
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "contrastive_bert.cli", "train", "--loss", "mnrl",
                             "--loss-options", '{"scael": 20}', "--output-dir", str(out)], capture_output=True, text=True)
    lines = result.stderr.splitlines()
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in lines if line.startswith("import time:")}
    errors = [line for line in lines if not line.startswith("import time:")]
    assert result.returncode == 2 and errors[0].startswith("contrastive-bert train: error: loss_options.scael")
    assert "contrastive_bert" in imported and not imported & {"torch", "transformers", "sentence_transformers"}
    assert not out.exists()
