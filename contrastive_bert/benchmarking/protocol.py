"""The one benchmark protocol of ``eval/``: methods, a grid, choice on dev, seeds, one result shape.

A benchmark on this protocol is its :class:`Method` list and its scoring function; the rest is here:

- a **method** is a name, the configurations tried on dev, the loss (its loss-registry name; None
  for a row that trains nothing, e.g. the untrained model) and its training rows;
- a **grid** (:class:`Grid`) is methods x configurations x seeds, per setting: every configuration
  of a method runs at the first seed and the dev score picks one (best, first on ties; a method of
  one configuration needs no choice), then the chosen configuration runs the other seeds. Where the
  dev score comes from runs of their own (a method's ``separate_dev``: e.g. a dev split of intents), the
  chosen configuration then runs every seed for test. A method may **build on** another's choice
  (``builds_on``: e.g. its configurations at the learning rate CE chose), and run its other seeds
  only if its first seed says so (``more_seeds_if``);
- a setting may **select** the methods that run beyond their dev runs (:attr:`Grid.select`: e.g.
  more seeds for the best rows on dev only, judged from every method's dev choice), and **follow**
  another setting (:attr:`Grid.follows`: no dev runs of its own, the other's choices at every seed);
  :attr:`Grid.order` sorts the plan (e.g. configuration-major);
- **the choice on dev** (:func:`choose_on_dev`): the largest dev score, then a tie-break, then the
  first; the one rule, also behind early exit's dev-chosen setting
  (:func:`contrastive_bert.inference.early_exit.choose_exit_setting`) and the benchmarks' best rows;
- **paired differences** (:func:`paired_difference`): method A minus method B seed by seed;
- **one result shape** (:meth:`Grid.results`): ``setting -> method -> entry`` with

  ``chosen_on_dev``: ``{"config", "options", "configs_tried", "configs_planned", "dev_by_config",
  "options_by_config"}``
  (while dev runs are missing: the best of those in), ``dev``: the chosen configuration's dev scores
  (metric -> value), ``test``: metric -> ``{mean, std, values}`` over ``seeds`` (``seeds_planned``:
  what the protocol will run), ``cost``: ``train_seconds`` (mean/std), ``steps``, ``train_rows``
  (the first seed's; those its runs record), ``general``: the general-ability block (name ->
  mean/std), ``loss``, then the method's own ``fields``.

  A results file is ``{"protocol": ..., "settings": {setting: {method: entry}}, "comparisons":
  {setting: ...}, ..., "environment": ...}`` (written by :func:`~contrastive_bert.benchmarking.write_results`).

A run is named by the benchmark's own key function (:attr:`Grid.key`), so a benchmark that moves onto
this protocol keeps the keys of its run log and resumes it instead of redoing it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from contrastive_bert.benchmarking.results import mean_std
from contrastive_bert.benchmarking.run_log import run_key

__all__ = ["Grid", "Method", "Run", "choose_on_dev", "paired_difference"]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Method:
    """One row of a benchmark's table.

    ``configs``: the configurations tried on dev (each a mapping: loss options and, e.g.,
    ``learning_rate``); ``loss``: the loss-registry name (None: nothing is trained); ``options``:
    fixed loss options of every configuration; ``rows``: the training-row format (None: the
    loss's own); ``settings``: where it runs (None: every setting); ``seeds``: its own seeds (None:
    the grid's; e.g. ``(0,)`` for a deterministic row such as the untrained model); ``separate_dev``:
    its dev scores come from dev-only runs (phase ``"dev"``, e.g. on a dev split of intents) and the
    chosen configuration then runs every seed for test (even with one configuration); ``fields``:
    what the results entry carries besides the protocol's (``baseline``, ``note``, ...);
    ``builds_on``: the method whose dev-chosen options each configuration starts from (it runs once
    that choice is made); ``more_seeds_if(record)``: the chosen configuration runs its other seeds
    only if its first seed's record passes (None: always)."""

    name: str
    loss: str | None = None
    configs: tuple[Mapping[str, Any], ...] = ({},)
    options: Mapping[str, Any] = field(default_factory=dict)
    rows: str | None = None
    settings: tuple[str, ...] | None = None
    seeds: tuple[int, ...] | None = None
    separate_dev: bool = False
    fields: Mapping[str, Any] = field(default_factory=dict)
    builds_on: str | None = None
    more_seeds_if: Callable[[dict], bool] | None = None

    def __post_init__(self) -> None:
        if not self.configs:
            raise ValueError(f"{self.name}: configs: expected at least one configuration")

    def runs_in(self, setting: str) -> bool:
        return self.settings is None or setting in self.settings

    def config(self, index: int) -> dict[str, Any]:
        """Configuration ``index`` with the fixed options under it."""
        return {**self.options, **self.configs[index]}


@dataclass(frozen=True)
class Run:
    """One run of the grid: ``phase`` ``"test"`` (scored on dev and test) or ``"dev"`` (a dev-only
    run of a method with ``separate_dev``); ``dev``: the dev score that chose ``config`` (runs after
    the choice of such a method), else None; ``inherited``: the options taken from the method it
    builds on (``Method.builds_on``), as ``(name, value)`` pairs."""

    setting: str
    method: str
    config: int
    seed: int
    phase: str = "test"
    dev: float | None = None
    inherited: tuple[tuple[str, Any], ...] = ()


def choose_on_dev(scores: Mapping[K, float], tie_break: Callable[[K], Any] | None = None) -> K | None:
    """The one choice on dev: the key of ``scores`` (a configuration, a method, an early-exit
    setting) with the largest dev score, then the largest ``tie_break(key)``, then the first in
    ``scores``' order; None without scores. A rule that minimises (e.g. fewest layers) passes
    minus its cost as the score; one that filters first (e.g. within a point of the full model)
    passes only the keys that qualify."""
    if not scores:
        return None
    position = {key: index for index, key in enumerate(scores)}
    return max(scores, key=lambda c: (scores[c], tie_break(c) if tie_break else 0, -position[c]))


def paired_difference(a: Mapping[str, Any], b: Mapping[str, Any], metric: str) -> dict | None:
    """Test ``metric`` of results entry ``a`` minus ``b`` on the seeds both ran: mean, std and
    values of the per-seed differences, the seeds and how many ``a`` won; ``clear`` when every seed
    agrees in sign and |mean| exceeds the std. None without a common seed."""
    def by_seed(entry):
        return dict(zip(entry.get("seeds", []), ((entry.get("test") or {}).get(metric) or {}).get("values", [])))

    scores_a, scores_b = by_seed(a), by_seed(b)
    seeds = sorted(set(scores_a) & set(scores_b))
    if not seeds:
        return None
    diffs = [scores_a[s] - scores_b[s] for s in seeds]
    stat = mean_std(diffs)
    won = sum(d > 0 for d in diffs)
    return {"mean": stat["mean"], "std": stat["std"], "values": diffs, "seeds": seeds, "seeds_won": won,
            "clear": len(seeds) > 1 and won in (0, len(seeds)) and abs(stat["mean"]) > stat["std"]}


Log = Mapping[str, dict]  # run key -> record (``{r["key"]: r for r in RunLog(...).records()}``)


@dataclass
class Grid:
    """Methods x configurations x seeds per setting, with the choice on dev.

    ``key(run)``: the run's key in the benchmark's run log (string or mapping); ``dev_score(record)``:
    the number the choice maximises; ``tie_break(method, config)``: compared on equal dev scores
    (larger wins; e.g. ``-epochs`` for the cheaper run).

    ``follows``: setting -> the setting whose dev choices it takes (it runs no dev runs of its own;
    the first seed is then no dev run); ``select``: setting -> ``pick(scores)``, which gets the dev
    score of every method's choice there (method -> score, in method order; the followed setting's
    for a following one) once all are made and returns the methods whose runs beyond their dev runs
    run, in the order they run; ``order(run)``: the plan's sort key (ties keep its own order)."""

    methods: Sequence[Method]
    settings: Sequence[str]
    seeds: Sequence[int]
    key: Callable[[Run], str | Mapping[str, Any]]
    dev_score: Callable[[dict], float]
    tie_break: Callable[[Method, Mapping[str, Any]], Any] | None = None
    follows: Mapping[str, str] = field(default_factory=dict)
    select: Mapping[str, Callable[[dict[str, float]], Sequence[str]]] = field(default_factory=dict)
    order: Callable[[Run], Any] | None = None

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ValueError("seeds: expected at least one seed")
        chained = {setting: source for setting, source in self.follows.items() if source in self.follows}
        if chained:
            raise ValueError(f"follows: a followed setting follows none itself, got {chained}")
        self.by_name = {method.name: method for method in self.methods}

    def method(self, name: str) -> Method:
        return self.by_name[name]

    def seeds_of(self, method: Method) -> list[int]:
        return list(method.seeds) if method.seeds is not None else list(self.seeds)

    def _record(self, log: Log, run: Run) -> dict | None:
        return log.get(run_key(self.key(run)))

    def needs_choice(self, method: Method) -> bool:
        return len(method.configs) > 1 or method.separate_dev

    def inherited(self, log: Log, setting: str, method: Method) -> dict[str, Any] | None:
        """The options ``method`` takes from the dev choice of the method it builds on (``{}`` if
        none); None while that choice is not made."""
        if method.builds_on is None:
            return {}
        base = self.method(method.builds_on)
        config = self.chosen(log, setting, base)
        return None if config is None else self.options(log, setting, base, config)

    def options(self, log: Log, setting: str, method: Method, config: int) -> dict[str, Any]:
        """Configuration ``config`` of ``method`` in full: inherited options, fixed options, its own."""
        return {**(self.inherited(log, setting, method) or {}), **method.config(config)}

    def dev_runs(self, setting: str, method: Method, log: Log | None = None) -> list[Run]:
        """The first-seed runs whose dev scores choose the configuration (none without a choice, or
        while the choice it builds on is not made in ``log``)."""
        inherited = self.inherited(log or {}, setting, method)
        if not self.needs_choice(method) or inherited is None or setting in self.follows:
            return []
        phase = "dev" if method.separate_dev else "test"
        return [Run(setting, method.name, c, self.seeds_of(method)[0], phase, inherited=tuple(inherited.items()))
                for c in range(len(method.configs))]

    def dev_scores(self, log: Log, setting: str, method: Method) -> dict[int, float]:
        """Configuration -> dev score, for those whose dev run is in ``log`` (in configuration order)."""
        scores = {}
        for run in self.dev_runs(setting, method, log):
            record = self._record(log, run)
            if record is not None:
                scores[run.config] = self.dev_score(record)
        return scores

    def chosen(self, log: Log, setting: str, method: Method, partial: bool = False) -> int | None:
        """The configuration chosen on dev: None until every dev run is in (``partial``: among
        those in); configuration 0 for a method without a choice; None while the choice it builds on is not made;
        in a following setting, the followed one's."""
        if setting in self.follows:
            return self.chosen(log, self.follows[setting], method, partial)
        if self.inherited(log, setting, method) is None:
            return None
        if not self.needs_choice(method):
            return 0
        scores = self.dev_scores(log, setting, method)
        if not partial and len(scores) < len(method.configs):
            return None
        tie_break = (lambda c: self.tie_break(method, method.configs[c])) if self.tie_break else None
        return choose_on_dev(scores, tie_break)

    def selected(self, log: Log, setting: str) -> list[str] | None:
        """The methods whose runs beyond their dev runs run in ``setting``, in their order: every method
        of the setting without a ``select``; else its pick, None until every choice it judges is made."""
        if setting not in self.select:
            return [method.name for method in self.methods if method.runs_in(setting)]
        source = self.follows.get(setting, setting)
        scores = {}
        for method in self.methods:
            if method.runs_in(source):
                record = self._chosen_dev_record(log, source, method)
                if record is None:
                    return None
                scores[method.name] = self.dev_score(record)
        return list(self.select[setting](scores))

    def _chosen_dev_record(self, log: Log, setting: str, method: Method) -> dict | None:
        """The record whose dev score chose ``method``'s configuration (for a method without a choice,
        its first seed's); None while the choice is not made or that run is missing."""
        config = self.chosen(log, setting, method)
        if config is None:
            return None
        if self.needs_choice(method):
            return self._record(log, self.dev_runs(setting, method, log)[config])
        inherited = self.inherited(log, setting, method) or {}
        return self._record(log, Run(setting, method.name, config, self.seeds_of(method)[0], inherited=tuple(inherited.items())))

    def _seed_runs(self, log: Log, setting: str, method: Method, config: int) -> list[Run]:
        """Configuration ``config``'s test run at every seed of the method (none while the choice it builds on is not made)."""
        inherited = self.inherited(log, setting, method)
        if inherited is None:
            return []
        dev = self.dev_scores(log, setting, method).get(config) if method.separate_dev else None
        return [Run(setting, method.name, config, seed, "test", dev, tuple(inherited.items())) for seed in self.seeds_of(method)]

    def final_runs(self, log: Log, setting: str, method: Method, config: int) -> list[Run]:
        """The chosen configuration's test runs: every seed (the first one is its dev run unless
        the method's ``separate_dev`` or the setting follows another); with ``more_seeds_if``, the
        first seed alone until its record passes; in a setting with a ``select``, only that dev run
        until the pick has the method."""
        runs = self._seed_runs(log, setting, method, config)
        if setting in self.select and method.name not in (self.selected(log, setting) or ()):
            return runs[:1] if not method.separate_dev and setting not in self.follows else []
        if method.more_seeds_if is not None and runs:
            first = self._record(log, runs[0])
            return runs if first is not None and method.more_seeds_if(first) else runs[:1]
        return runs

    def planned(self, log: Log, setting: str, method: Method) -> list[Run]:
        """Every run of ``method`` in ``setting`` that ``log`` has decided on, done or not: its dev
        runs, then once all are in, the chosen configuration's seeds."""
        config = self.chosen(log, setting, method)
        runs = self.dev_runs(setting, method, log) + ([] if config is None else self.final_runs(log, setting, method, config))
        return list(dict.fromkeys(runs))

    def plan(self, log: Log, methods: Iterable[str] | None = None, settings: Iterable[str] | None = None) -> list[Run]:
        """The runs not in ``log`` whose turn has come, in order: method by method (each in every
        setting), its :meth:`planned` runs; the methods a ``select`` picks (all their dev runs are
        in) last, setting by setting, in the pick's order; then sorted by ``order``."""
        names = list(methods) if methods is not None else [m.name for m in self.methods]
        settings = list(settings) if settings is not None else list(self.settings)
        picks = {setting: self.selected(log, setting) or [] for setting in settings if setting in self.select}
        turns = [(setting, name) for name in names for setting in settings if name not in picks.get(setting, ())]
        turns += [(setting, name) for setting, picked in picks.items() for name in picked if name in names]
        runs = [run for setting, name in turns if self.method(name).runs_in(setting)
                for run in self.planned(log, setting, self.method(name))]
        todo = [run for run in dict.fromkeys(runs) if self._record(log, run) is None]
        return sorted(todo, key=self.order) if self.order is not None else todo

    def entry(
        self,
        log: Log,
        setting: str,
        method: Method,
        test: Callable[[dict], Mapping[str, float]],
        dev: Callable[[dict], Mapping[str, float]] | None = None,
        general: Callable[[list[dict]], Mapping[str, Any] | None] | None = None,
        cost: Callable[[list[dict]], Mapping[str, Any]] | None = None,
        fields: Callable[[list[dict]], Mapping[str, Any]] | None = None,
    ) -> dict | None:
        """The results entry of ``method`` in ``setting`` from the runs in ``log`` (partial results
        allowed: the choice among the dev runs in, the seeds done so far); None before its first run.

        ``test(record)`` / ``dev(record)``: metric -> score of one run; ``general(records)``: the
        general-ability block over the seeds; ``cost(records)``: extra cost fields; ``fields(records)``:
        the benchmark's own fields of the entry. ``dev`` may return None (a run without dev scores).
        Every seed of the method in ``log`` counts, planned or not (``seeds_planned``: what the
        protocol runs)."""
        config = self.chosen(log, setting, method, partial=True)
        if config is None:
            return None
        scores = self.dev_scores(log, setting, method)
        planned = self.final_runs(log, setting, method, config)
        runs = [self._record(log, run) for run in self._seed_runs(log, setting, method, config)]
        seeds = [r for r in runs if r is not None]
        if not seeds and not scores:
            return None
        dev_run = self._record(log, self.dev_runs(setting, method, log)[config]) if scores else (seeds[0] if seeds else None)
        entry: dict[str, Any] = {
            "chosen_on_dev": {"config": config, "options": self.options(log, setting, method, config),
                              "configs_tried": len(scores) if scores else 1,
                              "configs_planned": 1 if setting in self.follows else len(method.configs),
                              "dev_by_config": {str(c): s for c, s in scores.items()},
                              "options_by_config": {str(c): self.options(log, setting, method, c) for c in scores}},
            "dev": None,
            "test": {}, "seeds": [], "seeds_planned": [run.seed for run in planned], "cost": {}, "general": None,
            **{"loss": method.loss, **method.fields},
        }
        scored_dev = dev(dev_run) if dev and dev_run is not None else None
        entry["dev"] = dict(scored_dev) if scored_dev is not None else None
        if seeds:
            metrics = [test(r) for r in seeds]
            entry["test"] = {name: mean_std([m[name] for m in metrics]) for name in metrics[0]}
            entry["seeds"] = [r_seed for r_seed, r in zip(self.seeds_of(method), runs) if r is not None]
            entry["cost"] = {**({"train_seconds": mean_std([r["train_seconds"] for r in seeds])}
                                if all(r.get("train_seconds") is not None for r in seeds) else {}),
                             **{k: seeds[0][k] for k in ("steps", "train_rows") if k in seeds[0]},
                             **(cost(seeds) if cost else {})}
            entry["general"] = general(seeds) if general else None
            entry.update(fields(seeds) if fields else {})
        return entry

    def results(self, log: Log, **scoring: Any) -> dict[str, dict[str, dict]]:
        """``setting -> method -> entry`` (see :meth:`entry`; ``scoring``: its ``test``, ``dev``,
        ``general``, ``cost``); settings and methods without a run are left out."""
        out: dict[str, dict[str, dict]] = {}
        for setting in self.settings:
            for method in self.methods:
                if method.runs_in(setting):
                    entry = self.entry(log, setting, method, **scoring)
                    if entry is not None:
                        out.setdefault(setting, {})[method.name] = entry
        return out
