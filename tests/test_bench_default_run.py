"""eval/bench_default_run.py: the command it times is the user's, and bad input fails before any run."""

from __future__ import annotations

import pytest

from bench_modules import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_default_run")


def test_it_times_the_users_command_with_only_the_folder_added(bench, tmp_path):
    argv = bench.command("scifact", tmp_path / "run")
    assert argv[0].endswith("contrastive-bert") and argv[1:] == ["train", "--datasets", "scifact", "--output-dir", str(tmp_path / "run")]


def test_the_skip_check_compares_the_recipe_the_command_derives(bench):
    recipe = bench.derived_recipe("scifact")
    assert recipe["datasets"] == ["scifact"] and recipe["corpus_negatives"] == {"num_negatives": 1, "fallback": "pairs"}
    assert "output_dir" not in recipe and recipe["dev_task"] == "scifact"


@pytest.mark.parametrize("datasets", ["stsb", "", "scifact,emotion"])
def test_only_retrieval_sets_are_accepted(bench, datasets, tmp_path):
    with pytest.raises(ValueError, match="--datasets: expected some of"):
        bench.main(["--datasets", datasets, "--output", str(tmp_path / "out.json")])
    assert not (tmp_path / "out.json").exists()
