"""contrastive_bert's losses, each a sentence-transformers loss module (``loss(features, labels)``).

Names load on first use: checking a recipe's loss options needs none of them, and importing the
cached variant pulls in sentence-transformers' GradCache machinery.
"""

from __future__ import annotations

from contrastive_bert.lazy import lazy_exports

_EXPORTS = {
    "QueueInfoNCELoss": "queue_infonce",
    "QueueInfoNCEConfig": "queue_config",
    "build_queue_infonce_loss": "queue_infonce",
    "CachedQueueInfoNCELoss": "cached_queue_infonce",
    "build_cached_queue_infonce_loss": "cached_queue_infonce",
    "QueueCoSENTLoss": "queue_cosent",
    "build_queue_cosent_loss": "queue_cosent",
    "queue_infonce_loss": "infonce_math",
    "ACLEmbedLoss": "acl_embed",
    "ClassMixedBatchSampler": "acl_embed",
    "label_anchored_supcon": "supcon",
    "CrossLayerLoss": "cross_layer",
    "adaptive_layer_baseline": "cross_layer",
    "cross_layer_contrastive_loss": "cross_layer",
    "logit_kd_loss": "cross_layer",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
