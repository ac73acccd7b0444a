"""The answer-selection row `queue_infonce` + hard negatives (pairs_quality.json) scored within a few
thousandths of plain `queue_infonce` on dev at every configuration: were its hard negatives ever
mined? On the benchmark's own rows and loss options, the probe must see hard negatives chosen
from the queue and the loss a `hard` part above zero once the queue holds rows; a silent no-op
fails here. (They are mined; the queue they come from holds 43 rows, see the last assertion.)"""

from __future__ import annotations

import tempfile

from bench_modules import load_bench
from contrastive_bert.training import TrainingRecipe, fit, get_loss_entry
from contrastive_bert.training.losses_registry import build_loss
from contrastive_bert.training.queue_probe import QueueNegativeProbe


def test_the_answer_selection_queue_hard_row_mines_hard_negatives(tiny_model, shared_data):
    bench = load_bench("bench_pairs_quality")
    method = bench.METHODS["queue_hard"]
    config = method.config(2)  # the dev choice of pairs_quality.json (temperature 0.02)
    config.pop("learning_rate")
    rows = bench.train_rows("answer_selection", method, str(shared_data), 0, "cpu", {})
    loss = build_loss(method.loss, tiny_model, rows, config, batch_size=bench.BATCH_SIZE)
    probe = QueueNegativeProbe(loss)
    parts = []
    forward = loss.forward
    loss.forward = lambda *a, **k: (lambda out: (parts.append({n: float(v.detach()) for n, v in out.items()}), out)[1])(forward(*a, **k))
    recipe = TrainingRecipe(datasets=["answer_selection"], loss=method.loss, loss_options=config, max_steps=6,
                            batch_size=bench.BATCH_SIZE, learning_rate=2e-5, max_seq_length=bench.MAX_SEQ_LENGTH,
                            save_steps=10**6, eval_steps=10**6, logging_steps=1, dev_task=None, eval_tasks=[])
    with tempfile.TemporaryDirectory() as output_dir:
        fit(tiny_model, rows, loss, recipe, output_dir, batch_sampler=get_loss_entry(method.loss).batch_sampler)
    probe.close()
    assert len(parts) == 6 and parts[0]["hard"] == 0  # the first step: an empty queue
    assert all(p["hard"] > 0 for p in parts[1:])
    with_queue = [step for step in probe.steps if step["fill"] > 0]
    assert len(with_queue) == 5 and all(step["hard_per_anchor"] > 0 for step in with_queue)
    # why the row moves so little: the seed's rule sizes the queue to 4 x 348 pairs / 32 = 43 rows, so
    # the hard negatives are re-weighted picks among 43 recent positives that are negatives anyway
    assert loss.queue.size == 43 and len(rows) == 348
