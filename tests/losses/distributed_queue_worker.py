"""Worker for tests/test_distributed_queue.py, run as ``torchrun --nproc_per_node 2 <this> MODEL_DIR OUT_DIR``.

Each rank enqueues (and appends to a dual bank) different rows: the queue and the bank must come
out identical on both ranks. Then it trains a QueueInfoNCELoss for a few steps under the trainer's
own DDP (gloo), and the dual bank (ContAccum) under DDP with 2 micro-batches a step, FIFO and
per-step, saving each loss's state.
"""

from __future__ import annotations

import sys

import torch


def main(model_dir: str, out_dir: str) -> None:
    import torch.distributed as dist
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    from contrastive_bert.losses import QueueInfoNCELoss
    from contrastive_bert.memory_bank import DualMemoryBank
    from contrastive_bert.queue import EmbeddingQueue

    args = SentenceTransformerTrainingArguments(
        output_dir=f"{out_dir}/run", max_steps=3, per_device_train_batch_size=4, ddp_backend="gloo", use_cpu=True,
        report_to=[], logging_steps=1, save_strategy="no", disable_tqdm=True, dataloader_drop_last=True,
        learning_rate=1e-3, ddp_find_unused_parameters=True,
    )
    _ = args.device  # sets up the process group from the torchrun environment
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    rank = dist.get_rank()

    queue = EmbeddingQueue(16, 4)
    for step in range(3):  # uneven batch sizes per rank, wrapping around the ring
        rows = torch.randn(3 + rank, 4, generator=torch.Generator().manual_seed(10 * step + rank))
        queue.enqueue(rows, ids=torch.arange(3 + rank) + 100 * rank + 1000 * step)
    torch.save(queue.state_dict(), f"{out_dir}/queue_direct_{rank}.pt")
    bank = DualMemoryBank(16, 4)
    for step in range(3):
        rows = 3 + rank
        generator = torch.Generator().manual_seed(10 * step + rank)
        bank.append(torch.randn(rows, 4, generator=generator), torch.randn(rows, 2, 4, generator=generator),
                    anchor_ids=torch.arange(rows) + 100 * rank + 1000 * step)
    torch.save(bank.state_dict(), f"{out_dir}/bank_direct_{rank}.pt")

    model = SentenceTransformer(model_dir, device="cpu")
    data = Dataset.from_dict(
        {"anchor": [f"sentence {i} about topic {i % 7}" for i in range(32)],
         "positive": [f"another sentence {i} on topic {i % 7}" for i in range(32)]}
    )
    loss = QueueInfoNCELoss(model, queue_size=64, num_hard_negatives=2, hard_negative_share=0.2, relative_margin=None)
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss)
    trainer.train()
    torch.save(loss.queue_state_dict(), f"{out_dir}/queue_train_{rank}.pt")

    accumulated = SentenceTransformerTrainingArguments(**{**args.to_dict(), "output_dir": f"{out_dir}/run_dual",
                                                          "gradient_accumulation_steps": 2})
    for scope in ("fifo", "step"):
        loss = QueueInfoNCELoss(model, dual_bank=True, bank_scope=scope, queue_size=64, relative_margin=None, num_hard_negatives=0)
        SentenceTransformerTrainer(model=model, args=accumulated, train_dataset=data, loss=loss).train()
        torch.save(loss.queue_state_dict(), f"{out_dir}/dual_{scope}_{rank}.pt")
    dist.barrier()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
