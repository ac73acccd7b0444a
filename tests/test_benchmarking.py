"""The benchmark harness: run log (torn line, restart), atomic results without NaN, shared flags,
wall-clock budget and merging run logs brought back from another machine."""

from __future__ import annotations

import argparse
import json
import logging
import math

import pytest

from contrastive_bert.benchmarking import (
    Budget,
    RunLog,
    add_common_arguments,
    json_safe,
    mean_std,
    merge,
    run_key,
    selected,
    setup_from_args,
    write_json,
    write_results,
)

# ----------------------------------------------------------------------------- run log


def test_run_log_appends_and_a_restart_skips_done_runs(tmp_path):
    path = tmp_path / "runs.jsonl"
    log = RunLog(path)
    assert not log.done("a") and log.records() == []
    log.append("a", {"score": 1.5})
    log.append({"method": "mnrl", "seed": 0}, {"score": 2.0})
    restarted = RunLog(path)
    assert restarted.done("a")
    assert restarted.done({"seed": 0, "method": "mnrl"})  # dict keys: order does not matter
    assert not restarted.done({"method": "mnrl", "seed": 1})
    assert [r["score"] for r in restarted.records()] == [1.5, 2.0]
    assert restarted.get("a") == {"score": 1.5, "key": "a"}
    assert path.read_text().count("\n") == 2


def test_run_key_of_a_dict_is_sorted_json():
    assert run_key({"b": 1, "a": None}) == '{"a": null, "b": 1}'
    assert run_key("sts/mnrl/0/0") == "sts/mnrl/0/0"
    with pytest.raises(ValueError, match="key"):
        run_key(3)


def test_torn_last_line_is_skipped_with_a_warning_and_cut_before_the_next_append(tmp_path, caplog):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"key": "a", "x": 1}\n{"key": "b", "x"')
    with caplog.at_level(logging.WARNING):
        log = RunLog(path)
    assert "torn last line" in caplog.text
    assert log.keys() == ["a"] and not log.done("b")
    log.append("b", {"x": 2})
    assert path.read_text() == '{"key": "a", "x": 1}\n{"x": 2, "key": "b"}\n'
    assert RunLog(path).keys() == ["a", "b"]


def test_a_complete_last_line_without_newline_is_kept(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"key": "a"}')
    log = RunLog(path)
    log.append("b", {})
    assert RunLog(path).keys() == ["a", "b"]


def test_an_unreadable_line_before_the_last_is_an_error(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"key": "a"}\nnot json\n{"key": "b"}\n')
    with pytest.raises(ValueError, match="line 2"):
        RunLog(path)


def test_nan_is_refused_and_nothing_is_written(tmp_path):
    path = tmp_path / "runs.jsonl"
    log = RunLog(path)
    with pytest.raises(ValueError, match="finite"):
        log.append("a", {"score": float("nan")})
    assert not path.exists() and not log.done("a")
    log.append("a", json_safe({"score": float("nan"), "inf": math.inf, "t": (1, 2)}))
    assert RunLog(path).get("a") == {"score": None, "inf": None, "t": [1, 2], "key": "a"}


def test_a_record_with_another_key_is_refused(tmp_path):
    with pytest.raises(ValueError, match="differs"):
        RunLog(tmp_path / "r.jsonl").append("a", {"key": "b"})


def test_a_redone_run_replaces_the_earlier_record(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"key": "a", "x": 1}\n{"key": "b", "x": 2}\n{"key": "a", "x": 3}\n')
    assert [(r["key"], r["x"]) for r in RunLog(path).records()] == [("a", 3), ("b", 2)]


# ----------------------------------------------------------------------------- results


def test_write_results_is_valid_json_with_the_environment(tmp_path):
    path = write_results(tmp_path / "sub" / "r.json", {"score": mean_std([1.0, 3.0])}, device="cpu")
    payload = json.loads(path.read_text())
    assert payload["score"] == {"mean": 2.0, "std": math.sqrt(2.0), "values": [1.0, 3.0]}
    environment = payload["environment"]
    assert environment["device"] == "cpu" and environment["gpu"] is None
    assert {"torch", "sentence_transformers", "transformers", "cpu_count", "date"} <= set(environment)
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temporary file left


def test_write_results_refuses_nan_and_keeps_the_old_file(tmp_path):
    path = write_json(tmp_path / "r.json", {"score": 1.0})
    with pytest.raises(ValueError, match="finite"):
        write_results(path, {"score": float("nan")})
    assert json.loads(path.read_text()) == {"score": 1.0}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_write_results_leaves_a_file_with_the_same_results_untouched(tmp_path, monkeypatch):
    from contrastive_bert.benchmarking import results as results_module

    dates = iter(["2026-01-01 00:00:00", "2026-01-02 00:00:00", "2026-01-03 00:00:00"])
    monkeypatch.setattr(results_module, "environment", lambda device=None: {"date": next(dates)})
    path = write_results(tmp_path / "r.json", {"score": (1.0, 2.0), "runs": 3})
    written = path.read_bytes()
    # the same results again (a tuple is written as a list; the payload's own environment is ignored): not re-dated
    write_results(path, {"runs": 3, "score": [1.0, 2.0], "environment": {"date": "anything"}})
    assert path.read_bytes() == written and json.loads(written)["environment"] == {"date": "2026-01-01 00:00:00"}
    # changed results: rewritten with the next environment
    write_results(path, {"score": [1.0, 2.0], "runs": 4})
    assert json.loads(path.read_text()) == {"score": [1.0, 2.0], "runs": 4, "environment": {"date": "2026-01-02 00:00:00"}}
    # a file that is not JSON is replaced, not an error
    path.write_text("{not json")
    write_results(path, {"runs": 4})
    assert json.loads(path.read_text())["runs"] == 4


def test_mean_std_of_one_value_and_of_none():
    assert mean_std([2.0]) == {"mean": 2.0, "std": 0.0, "values": [2.0]}
    with pytest.raises(ValueError, match="values"):
        mean_std([])


# ----------------------------------------------------------------------------- flags


def _parser(**kwargs) -> argparse.ArgumentParser:
    return add_common_arguments(argparse.ArgumentParser(), output="out.json", **kwargs)


def test_common_flags_defaults_and_forms():
    args = _parser(run_log="runs.jsonl", seeds=[0, 1, 2], methods=["mnrl", "cosent"]).parse_args([])
    assert (args.device, args.threads, args.data_dir, args.seeds, args.only) == ("cpu", None, None, [0, 1, 2], None)
    assert (args.output, args.run_log, args.summary_only, args.max_minutes, args.dry_run, args.verbosity) == (
        "out.json", "runs.jsonl", False, None, False, 0)
    parser = _parser(run_log="runs.jsonl", methods=["mnrl", "cosent"])
    assert parser.parse_args(["--seeds", "0", "1"]).seeds == [0, 1]
    assert parser.parse_args(["--seeds", "3,4"]).seeds == [3, 4]
    assert parser.parse_args(["--methods", "cosent,mnrl"]).only == ["cosent", "mnrl"]
    assert parser.parse_args(["--only", "mnrl", "-q"]).verbosity == -1
    assert parser.parse_args(["--device", "CUDA:1", "-v"]).device == "cuda:1"


def test_a_benchmark_without_run_log_has_no_summary_only():
    with pytest.raises(SystemExit):
        _parser().parse_args(["--summary-only"])


@pytest.mark.parametrize("argv", [["--device", "gpu"], ["--seeds", "a"], ["--threads", "x"]])
def test_bad_flags_are_usage_errors(argv):
    with pytest.raises(SystemExit):
        _parser().parse_args(argv)


def test_setup_from_args_sets_threads_device_seeds_and_budget(monkeypatch):
    import torch

    threads = torch.get_num_threads()
    try:
        args = _parser(seeds=[7], methods=["mnrl", "cosent"]).parse_args(["--device", "auto", "--threads", "1",
                                                                           "--only", "cosent", "--max-minutes", "2"])
        budget = setup_from_args(args)
        assert args.device == ("cuda" if torch.cuda.is_available() else "cpu")
        assert torch.get_num_threads() == 1
        assert args.budget is budget and budget.max_minutes == 2
        assert torch.initial_seed() == 7
        assert selected(args, ["mnrl", "cosent"]) == ["cosent"]
    finally:
        torch.set_num_threads(threads)


def test_setup_from_args_rejects_an_unknown_method():
    args = _parser(methods=["mnrl"]).parse_args(["--only", "mnrl,angel"])
    with pytest.raises(ValueError, match="--only: unknown angel"):
        setup_from_args(args)


def test_setup_from_args_rejects_cuda_without_one(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="--device"):
        setup_from_args(_parser().parse_args(["--device", "cuda", "--threads", str(torch.get_num_threads())]))


# ----------------------------------------------------------------------------- budget


def test_budget_stops_before_a_run_that_would_not_finish():
    now = [0.0]
    budget = Budget(1.0, clock=lambda: now[0])  # 60 s
    assert budget.allows("train")  # nothing known yet: the first run starts
    with budget.timed("train"):
        now[0] += 25.0
    assert budget.remaining() == 35.0
    assert budget.allows("train")  # 25 s needed, 35 s left
    now[0] += 25.0
    assert not budget.allows("train")  # 25 s needed, 10 s left
    assert budget.stopped and not budget.allows("cheap", estimate=1.0)  # stays stopped: runs stay in order


def test_budget_uses_the_estimate_before_the_first_run_and_none_is_unlimited():
    now = [0.0]
    assert not Budget(1.0, clock=lambda: now[0]).allows("train", estimate=61.0)
    assert Budget(None).allows("train", estimate=1e9)
    with pytest.raises(ValueError, match="max_minutes"):
        Budget(0)


# ----------------------------------------------------------------------------- merge


def test_merge_appends_new_keys_skips_dry_runs_and_resummarises(tmp_path):
    source, destination = tmp_path / "out", tmp_path / "results"
    RunLog(destination / "x_runs.jsonl").append("a", {"v": 1})
    incoming = RunLog(source / "x_runs.jsonl")
    incoming.append("a", {"v": 100})  # already here: the local record stays
    incoming.append("b", {"v": 2})
    incoming.append("c", {"v": 3, "dry_run": True})
    script = tmp_path / "summarise.py"
    script.write_text(
        "import argparse, json\nfrom contrastive_bert.benchmarking import RunLog\n"
        "p = argparse.ArgumentParser(); p.add_argument('--summary-only', action='store_true')\n"
        "p.add_argument('--run-log'); p.add_argument('--output'); a = p.parse_args()\n"
        "open(a.output, 'w').write(json.dumps(sum(r['v'] for r in RunLog(a.run_log).records())))\n")
    (source / "manifest.json").write_text(json.dumps(
        {"benchmarks": [{"script": script.name, "run_log": "x_runs.jsonl", "output": "x.json"}]}))
    report = merge(source, destination, repo=tmp_path)
    assert report["x_runs.jsonl"] == {"added": 1, "present": 1, "dry_run": 1, "summarised": True}
    assert [(r["key"], r["v"]) for r in RunLog(destination / "x_runs.jsonl").records()] == [("a", 1), ("b", 2)]
    assert json.loads((destination / "x.json").read_text()) == 3
    assert merge(source, destination, repo=tmp_path)["x_runs.jsonl"]["added"] == 0  # merging twice adds nothing


def test_merge_command_reports_a_missing_folder(tmp_path, capsys):
    from contrastive_bert.benchmarking.__main__ import main

    assert main(["merge", str(tmp_path / "nowhere"), str(tmp_path / "r")]) == 2
    assert "source_dir" in capsys.readouterr().err


def test_merge_copies_results_without_a_run_log_except_from_a_dry_run(tmp_path):
    source, destination = tmp_path / "out", tmp_path / "results"
    source.mkdir()
    (source / "speed_gpu.json").write_text('{"step": 0.01}')
    (source / "manifest.json").write_text(json.dumps({"benchmarks": [], "files": ["speed_gpu.json"], "dry_run": False}))
    assert merge(source, destination)["speed_gpu.json"] == {"copied": True}
    assert json.loads((destination / "speed_gpu.json").read_text()) == {"step": 0.01}
    (source / "manifest.json").write_text(json.dumps({"benchmarks": [], "files": ["speed_gpu.json"], "dry_run": True}))
    (source / "speed_gpu.json").write_text('{"step": 99}')
    assert merge(source, destination)["speed_gpu.json"] == {"copied": False}
    assert json.loads((destination / "speed_gpu.json").read_text()) == {"step": 0.01}


def test_run_log_of_mode_keeps_dry_runs_and_real_runs_apart(tmp_path):
    """A --dry-run record (numbers meaningless) never counts as a real run done, nor the reverse."""
    from contrastive_bert.benchmarking import RunLog

    log = RunLog(tmp_path / "runs.jsonl")
    log.append("a", {"dry_run": True, "test": 1.0})
    log.append("b", {"test": 2.0})  # records made before the flag existed are real runs
    log.append("c", {"dry_run": False, "test": 3.0})
    assert sorted(log.of_mode(False)) == ["b", "c"] and sorted(log.of_mode(True)) == ["a"]
    log.append("a", {"dry_run": False, "test": 4.0})  # the real run replaces the dry one
    assert log.of_mode(False)["a"]["test"] == 4.0 and log.of_mode(True) == {}
