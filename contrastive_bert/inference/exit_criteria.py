"""Early-exit criteria and their default thresholds (a light module: the CLI parser needs them)."""

EXIT_CRITERIA: tuple[str, ...] = ("confidence", "margin", "patience", "none")
DEFAULT_THRESHOLDS: dict[str, float] = {"confidence": 0.9, "margin": 0.3}
