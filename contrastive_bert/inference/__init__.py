from contrastive_bert.inference.zero_shot import ZeroShotClassifier  # noqa: F401  (issue 4)
