from contrastive_bert.losses.queue_infonce import QueueInfoNCELoss, build_queue_infonce_loss  # noqa: F401  (issue 3)
from contrastive_bert.losses.cached_queue_infonce import CachedQueueInfoNCELoss  # noqa: F401  (issue 3)
from contrastive_bert.losses.acl_embed import ACLEmbedLoss  # noqa: F401  (issue 4)
from contrastive_bert.losses.cross_layer import CrossLayerLoss, adaptive_layer_baseline, cross_layer_contrastive_loss, logit_kd_loss  # noqa: F401  (issue 5)
