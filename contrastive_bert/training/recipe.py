"""Training recipes: one dataclass whose fields come from a YAML/JSON file and/or CLI flags."""

from __future__ import annotations

import dataclasses
import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contrastive_bert.training.data_defaults import DERIVED_FIELDS, derived_defaults

MIXED_PRECISION = ("no", "fp16", "bf16", "auto")
RECIPE_FILE = "recipe.json"
# Fields a resumed run may change (a logged override): how long to train, how often to log/save,
# where the data and the run folder live. Any other field differing from the recorded recipe is an error.
RESUME_OVERRIDABLE = ("max_steps", "epochs", "eval_steps", "save_steps", "save_total_limit", "logging_steps", "max_eval_samples",
                      "data_dir", "output_dir")
RUN_CONTROL = ("overwrite", "resume")  # how to start this invocation, not part of the run


def _yaml_error_mark(error):
    """Where a YAML mistake is: the start of the token left unfinished when there is one (PyYAML's
    ``context_mark`` "while scanning ...": a key without its ``:``, an unclosed quote, which PyYAML
    notices only on the next line), else where the parser stopped (``problem_mark``)."""
    problem, context = getattr(error, "problem_mark", None), getattr(error, "context_mark", None)
    unfinished = (getattr(error, "context", None) or "").startswith("while scanning")
    return context if context is not None and (unfinished or problem is None) else problem


def _yaml_error_place(error) -> str:
    """``", line L, column C"`` (1-based; PyYAML's marks count from 0) of a YAML error, or ''."""
    mark = _yaml_error_mark(error)
    return f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _yaml_problem(error) -> str:
    """What PyYAML found, with what it was reading when that started on an earlier line."""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    context, mark = getattr(error, "context", None), _yaml_error_mark(error)
    return f"{problem} {context}" if context and mark is getattr(error, "context_mark", None) else problem


@dataclass
class TrainingRecipe:
    """Everything a training run needs. Defaults: fine-tune the bundled all-MiniLM-L6-v2 with
    MultipleNegativesRankingLoss on STS-B's high-scoring pairs, dev-evaluate on STS-B. Built by
    :meth:`from_dict` (files, flags), the data-dependent fields left out are derived from
    ``datasets`` instead (:mod:`contrastive_bert.training.data_defaults`)."""

    model: str = "default"
    datasets: list[str] = field(default_factory=lambda: ["stsb"])
    loss: str = "mnrl"
    loss_options: dict[str, Any] = field(default_factory=dict)
    output_dir: str = "output/stsb-mnrl"
    data_dir: str | None = None
    epochs: float = 1.0
    max_steps: int = -1
    batch_size: int = 32
    learning_rate: float = 2e-5
    head_learning_rate: float | None = None
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    seed: int = 42
    max_seq_length: int | None = 128
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    min_pair_score: float = 0.8
    labelled_negatives: bool = False
    corpus_negatives: dict[str, Any] | None = None
    dev_task: str | None = "stsb"
    eval_tasks: list[str] = field(default_factory=lambda: ["stsb"])
    eval_steps: int = 50
    save_steps: int = 50
    save_total_limit: int = 2
    logging_steps: int = 10
    gradient_accumulation_steps: int = 1
    gradient_checkpointing: bool = False
    freeze_layers: int = 0
    freeze_embeddings: bool = False
    max_grad_norm: float = 1.0
    mixed_precision: str = "no"
    stages: list[dict[str, Any]] = field(default_factory=list)
    overwrite: bool = False
    resume: bool = False

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Cheap checks of every field, before any model or data is loaded."""
        for name in ("epochs", "learning_rate", "warmup_ratio", "weight_decay", "min_pair_score", "max_grad_norm"):
            value = getattr(self, name)  # YAML 1.1 reads `2e-5` (no dot) as a string
            if value is None and name == "max_grad_norm":
                continue
            try:
                setattr(self, name, float(value))
            except (TypeError, ValueError):
                raise ValueError(f"{name}: expected a number, got {value!r}") from None
        positive_ints = ("batch_size", "eval_steps", "save_steps", "logging_steps", "gradient_accumulation_steps", "save_total_limit")
        for name in positive_ints:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: expected a positive integer, got {value!r}")
        if not isinstance(self.max_steps, int) or (self.max_steps < 1 and self.max_steps != -1):
            raise ValueError(f"max_steps: expected a positive integer or -1 (use epochs), got {self.max_steps!r}")
        if not self.epochs > 0:
            raise ValueError(f"epochs: expected a positive number, got {self.epochs!r}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate: expected a positive number, got {self.learning_rate!r}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio: expected a value in [0, 1), got {self.warmup_ratio!r}")
        if not 0 <= self.min_pair_score <= 1:
            raise ValueError(f"min_pair_score: expected a value in [0, 1], got {self.min_pair_score!r}")
        if not isinstance(self.labelled_negatives, bool):
            raise ValueError(f"labelled_negatives: expected true or false, got {self.labelled_negatives!r}")
        from contrastive_bert.training.corpus_negatives import CorpusNegatives

        CorpusNegatives.from_field(self.corpus_negatives)  # each key checked here, before anything loads
        if self.corpus_negatives is not None and self.labelled_negatives:
            raise ValueError("corpus_negatives, labelled_negatives: choose one source of hard negatives")
        if self.head_learning_rate is not None and not self.head_learning_rate > 0:
            raise ValueError(f"head_learning_rate: expected a positive number or None, got {self.head_learning_rate!r}")
        if self.max_seq_length is not None and self.max_seq_length < 2:
            raise ValueError(f"max_seq_length: expected at least 2 tokens, got {self.max_seq_length!r}")
        if self.max_train_samples is not None and self.max_train_samples < 1:
            raise ValueError(f"max_train_samples: expected a positive integer, got {self.max_train_samples!r}")
        if self.max_eval_samples is not None and (
            isinstance(self.max_eval_samples, bool) or not isinstance(self.max_eval_samples, int) or self.max_eval_samples < 0
        ):
            raise ValueError(f"max_eval_samples: expected a non-negative integer (0 skips the evaluation), got {self.max_eval_samples!r}")
        if self.freeze_layers < 0:
            raise ValueError(f"freeze_layers: expected a non-negative number of layers, got {self.freeze_layers!r}")
        if self.max_grad_norm is not None and self.max_grad_norm < 0:
            raise ValueError(f"max_grad_norm: expected a non-negative number, got {self.max_grad_norm!r}")
        if self.mixed_precision not in MIXED_PRECISION:
            raise ValueError(f"mixed_precision: expected one of {MIXED_PRECISION}, got {self.mixed_precision!r}")
        if isinstance(self.datasets, str):
            self.datasets = [name.strip() for name in self.datasets.split(",") if name.strip()]
        if isinstance(self.eval_tasks, str):
            self.eval_tasks = [name.strip() for name in self.eval_tasks.split(",") if name.strip()]
        if not self.datasets:
            raise ValueError("datasets: expected at least one training data set")
        if not isinstance(self.loss_options, dict):
            raise ValueError(f"loss_options: expected a mapping of keyword arguments, got {self.loss_options!r}")
        if self.overwrite and self.resume:
            raise ValueError("overwrite, resume: choose one: --overwrite starts afresh, --resume continues the last checkpoint")
        self._check_stage_fields()

    def _check_stage_fields(self) -> None:
        """``stages``: a list of partial recipes, each naming only known fields (see training/stages.py)."""
        if not isinstance(self.stages, list) or any(not isinstance(stage, dict) for stage in self.stages):
            raise ValueError(f"stages: expected a list of partial recipes (mappings of recipe fields), got {self.stages!r}")
        for index, stage in enumerate(self.stages):
            for key in stage:
                if key not in self.field_names():
                    close = difflib.get_close_matches(key, self.field_names(), n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    raise ValueError(f"stages[{index}].{key}: unknown field{hint}")

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, values: dict[str, Any], derive: bool = True) -> TrainingRecipe:
        """A recipe from field values (a file's, flags'). With ``derive``, the fields left out of
        ``values`` among :data:`~contrastive_bert.training.data_defaults.DERIVED_FIELDS` are derived
        from the training data and the loss (:mod:`contrastive_bert.training.data_defaults`: a
        retrieval set is its own dev and eval task at the model's full length, with mined negatives
        and, under MNRL, the benchmark's schedule); given values win."""
        unknown = [key for key in values if key not in cls.field_names()]
        if unknown:
            key = unknown[0]
            close = difflib.get_close_matches(key, cls.field_names(), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"recipe: unknown field {key!r}{hint}; fields are {', '.join(cls.field_names())}")
        if derive and not values.get("resume") and any(name not in values for name in DERIVED_FIELDS):
            defaults = cls()
            derived = derived_defaults(values.get("datasets", defaults.datasets), values.get("loss", defaults.loss))
            values = {**{k: v for k, v in derived.items() if k not in values}, **values}
        return cls(**values)

    @classmethod
    def from_file(cls, path: str | Path, overrides: dict[str, Any] | None = None) -> TrainingRecipe:
        """Read a ``.yaml``/``.yml``/``.json`` recipe; ``overrides`` (e.g. CLI flags) win."""
        return cls.from_dict({**cls.read_file(path), **(overrides or {})})

    @staticmethod
    def read_file(path: str | Path) -> dict[str, Any]:
        """The field values of a ``.yaml``/``.yml``/``.json`` recipe file, unchecked."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"recipe: file not found: {path}")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"recipe: {path} is not UTF-8 text ({error.reason} at byte {error.start})") from None
        if path.suffix.lower() == ".json":
            try:
                values = json.loads(text)
            except json.JSONDecodeError as error:
                raise ValueError(f"recipe: {path}, line {error.lineno}, column {error.colno}: not valid JSON ({error.msg})") from None
        elif path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            try:
                values = yaml.safe_load(text) or {}
            except yaml.YAMLError as error:
                raise ValueError(f"recipe: {path}{_yaml_error_place(error)}: not valid YAML ({_yaml_problem(error)})") from None
        else:
            raise ValueError(f"recipe: expected a .yaml, .yml or .json file, got {path.name}")
        if not isinstance(values, dict):
            raise ValueError(f"recipe: {path} must hold a mapping of fields, got {type(values).__name__}")
        return values

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def recorded(self) -> dict[str, Any]:
        """The fields written to ``<output_dir>/recipe.json``: the run, without how it was started."""
        return {key: value for key, value in self.to_dict().items() if key not in RUN_CONTROL}

    @classmethod
    def load_recorded(cls, output_dir: str | Path) -> TrainingRecipe:
        """The recipe a run in ``output_dir`` recorded (``resume: ...`` error when there is none)."""
        path = Path(output_dir) / RECIPE_FILE
        if not path.is_file():
            raise ValueError(f"resume: {path} not found; --resume continues a run started by this package in --output-dir")
        try:
            values = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ValueError(f"resume: {path} is not valid JSON ({error.msg})") from None
        if not isinstance(values, dict):
            raise ValueError(f"resume: {path} must hold a mapping of recipe fields")
        return cls.from_dict({key: value for key, value in values.items() if key not in RUN_CONTROL}, derive=False)

    def resume_overrides(self, recorded: TrainingRecipe) -> dict[str, tuple[Any, Any]]:
        """``{field: (recorded, now)}`` for the fields that differ from ``recorded`` and may change
        on resume; ``ValueError`` naming the first field that differs and may not."""
        changed = {name: (getattr(recorded, name), getattr(self, name)) for name in self.field_names()
                   if name not in RUN_CONTROL and getattr(recorded, name) != getattr(self, name)}
        for name, (was, now) in changed.items():
            if name not in RESUME_OVERRIDABLE:
                raise ValueError(
                    f"{name}: the run in {recorded.output_dir} was recorded with {was!r}, got {now!r}; "
                    f"--resume continues a run as recorded (only {', '.join(RESUME_OVERRIDABLE)} may change)"
                )
        return changed

    @classmethod
    def for_resume(cls, output_dir: str | Path, given: dict[str, Any]) -> TrainingRecipe:
        """The recorded recipe of ``output_dir`` with the ``given`` fields (CLI flags, a recipe
        file) applied: each must equal the recorded value or be one that may change on resume."""
        recorded = cls.load_recorded(output_dir)
        recipe = cls.from_dict({**recorded.recorded(), **given, "output_dir": str(output_dir), "resume": True}, derive=False)
        recipe.resume_overrides(recorded)  # the runner logs the allowed changes
        return recipe
