"""What the generated pages call each benchmark's methods, settings and measures: one vocabulary for
the results tables (scripts/render_docs.py) and the README's blocks (render_readme.py), which name
the same retrieval and ACL methods. A name a mapping lacks is shown as the key itself."""

PAIR_LABELS = {
    "untrained": "untrained",
    "mnrl": "MNRL (ST)",
    "cosent": "CoSENT (ST)",
    "queue_cosent": "`queue_cosent`",
    "queue_guide": "`queue_infonce` + guide veto",
    "queue_hard": "`queue_infonce` + 8 hard negatives",
    "queue": "`queue_infonce`, queue only",
    "gist": "GISTEmbed, guide: bundled model (ST)",
    "mnrl_hardness": "MNRL, hardness_mode in-batch (ST)",
    "mnrl_mined": "MNRL on offline-mined triplets (ST)",
    "queue_corpus": "`queue_infonce`, queue = whole train set",
    "mnrl_qa_negatives": "MNRL on labelled-negative triplets (ST)",
    "queue_qa_negatives": "`queue_infonce` on labelled-negative triplets",
}
GENERAL_LABELS = {"zero_shot_banking77": "zero-shot Banking77", "zero_shot_emotion": "zero-shot emotion",
                  "zero_shot_sst2": "zero-shot SST-2", "stsb": "STS-B test"}

RETRIEVAL_LABELS = {
    "untrained": "untrained",
    "mnrl": "MNRL (ST)",
    "mnrl_st_mined": "MNRL on `mine_hard_negatives` triplets (ST)",
    "mnrl_corpus_mined": "MNRL on corpus-mined triplets (ours, no queue)",
    "queue_corpus_mined": "`queue_infonce` + 8 queue hard negatives, corpus-mined triplets",
    "queue_hard": "`queue_infonce` + 8 queue hard negatives, pairs",
    "mnrl_ance": "MNRL, corpus negatives re-mined each epoch (ANCE)",
    "queue_ance": "`queue_infonce` + 8 queue hard negatives, re-mined corpus negatives",
    "gist": "GISTEmbed, guide: bundled model (ST)",
    "cached_mnrl": "CachedMNRL, batch 128 (ST)",
}

MEMORY_BUDGET_LABELS = {
    "untrained": "untrained",
    "mnrl_accumulated": "MNRL, 8 x 8 accumulated (ST)",
    "mnrl_large": "MNRL, batch 64 (ST; large memory)",
    "cached_mnrl": "CachedMNRL, batch 64 in mini-batches of 8 (ST)",
    "mnrl_large_checkpointing": "MNRL, batch 64, gradient checkpointing (ST)",
    "queue_fifo": "`queue_infonce`, 8 x 8, document queue (FIFO)",
    "queue_dual_step": "`queue_infonce`, 8 x 8, dual bank per step (ContAccum)",
    "queue_dual_fifo": "`queue_infonce`, 8 x 8, dual bank FIFO (2 steps)",
}

ACL_LABELS = {"logreg": "logistic regression on frozen embeddings", "ce": "CE", "supcon": "CE + SupCon",
              "acl_embed": "ACL-Embed", "acl_embed_encoded": "ACL-Embed, encoded label names",
              "acl_embed_grad": "ACL-Embed + ACL-Grad"}
ACL_OPTIONS = {"learning_rate": "lr", "contrastive_weight": "λ", "temperature": "τ"}
ACL_DATASETS = {"banking77": "Banking77", "emotion": "emotion", "sst2": "SST-2"}
ACL_REGIMES = {"full": "all of train", "10-shot": "10 per class", "full16k": "all of train (16,000 rows)"}
ACL_SAMPLED = {"emotion": "a 3,000-row sample of train", "sst2": "a 3,000-row sample of train"}  # "full" as it was used


def acl_regime(dataset: str, regime: str) -> str:
    """The training data of an ACL regime as it was used: all of train, a sample of N rows, k-shot."""
    return ACL_SAMPLED.get(dataset, ACL_REGIMES[regime]) if regime == "full" else ACL_REGIMES[regime]

ACL_COST_LABELS = {"acl_embed": "ACL-Embed, no gating", "acl_embed_grad_exact": "ACL-Grad, exact angle over all parameters",
                   "acl_embed_grad_head_last_layer": "ACL-Grad, angle over the head + last encoder layer (default)",
                   "acl_embed_grad_exact_every5": "ACL-Grad, exact angle every 5 steps",
                   "acl_embed_encoded": "ACL-Embed with the encoded label head"}
ACL_SHORT_LABELS = {"ce": "CE", "supcon": "CE + SupCon", "acl": "ACL-Embed", "acl_grad": "ACL-Embed + ACL-Grad"}

ZERO_SHOT_LABELS = {"untrained": "untrained", "ce_free": "CE, free label vectors",
                    "acl_embed_free": "ACL-Embed, free label vectors", "ce_encoded": "CE, encoded label names",
                    "acl_embed_encoded": "ACL-Embed, encoded label names",
                    "ce_encoded_tuned": "CE, encoded, tuned on the dev split of intents",
                    "acl_embed_encoded_tuned": "ACL-Embed, encoded, tuned on the dev split of intents"}

EXIT_COST_LABELS = {"tokenise": "tokenisation", "embed": "embeddings", "mask": "layer mask", "layer": "one encoder layer",
                    "exit_head": "one exit head", "final_head": "the final classifier", "decision": "the exit decision"}
EXIT_METHODS = {"ce": "CE", "kd": "logit KD", "acl_cl": "ACL-CL"}

TOPK_LABELS = {"torch_flat_ms": "torch matmul + topk", "faiss_flat_ms": "FAISS flat", "faiss_ivf_ms": "FAISS IVF",
               "faiss_hnsw_ms": "FAISS HNSW"}
QUEUE_MEMORY_LABELS = {"mnrl": "MNRL", "queue": "QueueInfoNCE", "cached_queue": "CachedQueueInfoNCE (GradCache, mini-batch 32)"}
QUEUE_QUALITY_LABELS = {"untrained": "untrained", "mnrl": "MNRL (ST)", "cached_mnrl": "CachedMNRL (ST)",
                        "queue": "QueueInfoNCE, queue only", "queue_hard": "QueueInfoNCE + hard negatives",
                        "queue_hard_ema": "QueueInfoNCE + hard negatives + momentum encoder (m = 0.99)"}
BASELINE_LABELS = {"untrained": "all-MiniLM-L6-v2, untrained", "mnrl": "+ MNRL on STS-B (score ≥ 4/5) + MRPC paraphrase pairs",
                   "cosent": "+ CoSENT on STS-B train scores", "cosent_stsb_mrpc": "+ CoSENT on STS-B + MRPC (MRPC labels as 0/1 scores)"}
