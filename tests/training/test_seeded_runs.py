"""A fixed ``seed`` gives the same run: a loss with parameters of its own (the ``acl`` loss's label
head, the multi-exit heads) is initialised after seeding, not from whatever the process's random
state happens to be, so two ``train`` calls at one seed end with equal weights."""

from __future__ import annotations

import torch

from contrastive_bert.heads.label_embedding import find_label_head
from contrastive_bert.training import TrainingRecipe
from contrastive_bert.training.runner import train


def _run(tmp_path, shared_data, name: str, noise_seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(noise_seed)  # a different process state before each run
    torch.rand(noise_seed + 1)
    recipe = TrainingRecipe(
        model="tiny", datasets=["banking77"], loss="acl", loss_options={"mode": "acl", "label_embedding": "free"},
        output_dir=str(tmp_path / name), data_dir=str(shared_data), max_steps=2, batch_size=8, learning_rate=1e-3,
        warmup_ratio=0.0, max_train_samples=64, max_seq_length=16, dev_task=None, eval_tasks=[], save_steps=2,
        logging_steps=1, seed=0,
    )
    outcome = train(recipe)
    assert find_label_head(outcome.model) is not None  # the head's weight is among the model's parameters
    return {name: p.detach().clone() for name, p in outcome.model.named_parameters()}


def test_two_runs_at_one_seed_end_with_equal_weights(tmp_path, shared_data, tiny_loader):
    first, second = _run(tmp_path, shared_data, "a", 1), _run(tmp_path, shared_data, "b", 2)
    assert first.keys() == second.keys()
    for name in first:
        torch.testing.assert_close(second[name], first[name], rtol=0, atol=0, msg=name)
