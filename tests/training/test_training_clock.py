"""TrainingClock: the seconds a checkpoint carries, read back on resume; a checkpoint without a clock
(written before it existed) leaves the total unknown and writes none further."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

from contrastive_bert.training.training_clock import CLOCK_FILE, TrainingClock, read_clock


def _save(clock: TrainingClock, output_dir, step: int):
    (output_dir / f"checkpoint-{step}").mkdir()
    state = SimpleNamespace(is_world_process_zero=True, global_step=step)
    clock.on_save(SimpleNamespace(output_dir=str(output_dir)), state, None)
    return output_dir / f"checkpoint-{step}" / CLOCK_FILE


def test_a_fresh_clock_counts_from_zero_and_a_resumed_one_from_its_checkpoint(tmp_path):
    fresh = TrainingClock()
    time.sleep(0.05)
    written = _save(fresh, tmp_path, 2)
    assert fresh.carried == 0.0 and 0.05 <= json.loads(written.read_text())["train_seconds"] < 5.0
    written.write_text(json.dumps({"train_seconds": 300.0}))
    resumed = TrainingClock(tmp_path / "checkpoint-2")
    assert resumed.carried == 300.0 == read_clock(tmp_path / "checkpoint-2")
    assert 300.0 <= resumed.seconds() < 305.0
    assert 300.0 <= json.loads(_save(resumed, tmp_path, 4).read_text())["train_seconds"] < 305.0


def test_a_checkpoint_without_a_clock_gives_an_unknown_start_and_no_clock_after_it(tmp_path, caplog):
    (tmp_path / "checkpoint-2").mkdir()
    clock = TrainingClock(tmp_path / "checkpoint-2")
    assert clock.carried is None and clock.seconds() < 5.0  # this part only
    assert not _save(clock, tmp_path, 4).exists()  # a later resume must not take this part for the whole
    (tmp_path / "checkpoint-2" / CLOCK_FILE).write_text("not json")
    assert read_clock(tmp_path / "checkpoint-2") is None and "unreadable" in caplog.text


def test_only_the_main_process_writes(tmp_path):
    (tmp_path / "checkpoint-2").mkdir()
    TrainingClock().on_save(SimpleNamespace(output_dir=str(tmp_path)), SimpleNamespace(is_world_process_zero=False, global_step=2), None)
    assert not (tmp_path / "checkpoint-2" / CLOCK_FILE).exists()
