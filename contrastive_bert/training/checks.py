"""The checks of one training run that need no model, load no data and write nothing.

:func:`~contrastive_bert.training.runner.check_recipe` runs them on a recipe,
:func:`~contrastive_bert.training.stages.check_stages` on every stage of a staged recipe before the
first stage trains; a stage then runs without checking again.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path

from contrastive_bert.training.losses_registry import LossEntry, get_loss_entry
from contrastive_bert.training.recipe import TrainingRecipe

__all__ = ["AUTO_BF16_ON_CPU", "BF16_CPU_FLAGS", "check_run_inputs", "cpu_flags", "cpu_supports_bf16", "precision_flags"]

logger = logging.getLogger(__name__)

#: the /proc/cpuinfo flags of a CPU with bf16 arithmetic of its own (AVX512_BF16's dot products,
#: AMX's bf16 tiles); without them CPU autocast in bf16 runs, but emulated in fp32 arithmetic
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
#: whether ``mixed_precision: auto`` trains in bf16 on a CPU with :data:`BF16_CPU_FLAGS`: on, since
#: eval/bench_cpu_precision.py -> eval/results/cpu_precision.json measured bf16 faster per step at
#: equal SciFact test nDCG@10 (``comparison.bf16_for_auto``; one seed of the SciFact recipe)
AUTO_BF16_ON_CPU = True


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (``flags`` on x86, ``Features`` on ARM), from
    the first processor of ``cpuinfo``; empty where the file does not exist (macOS, Windows)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip().lower() in ("flags", "features"):
            return frozenset(value.split())
    return frozenset()


@lru_cache(maxsize=1)
def cpu_supports_bf16() -> bool:
    """Whether this CPU computes in bf16 natively (AVX512_BF16 or AMX-BF16): torch's own check
    (``torch.cpu._is_avx512_bf16_supported`` / ``_is_amx_tile_supported``, private, so looked up
    with care) or the flags of /proc/cpuinfo. Most CPUs (AVX2 only) say no: bf16 autocast still
    runs there, but emulated and slower than fp32."""
    import torch

    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        check = getattr(torch.cpu, name, None)
        try:
            if check is not None and check():
                return True
        except Exception:  # a private API: a failure means "cannot tell", not an error
            logger.debug("torch.cpu.%s failed", name, exc_info=True)
    return any(flag in cpu_flags() for flag in BF16_CPU_FLAGS)


@lru_cache(maxsize=1)
def _warn_emulated_bf16() -> None:
    logger.warning("mixed_precision: this CPU has no bf16 instructions (%s): bf16 runs emulated and is "
                   "likely slower than fp32 ('no')", " or ".join(BF16_CPU_FLAGS))


def precision_flags(mixed_precision: str) -> dict[str, bool]:
    """The trainer's flags for ``mixed_precision`` (``no``, ``fp16``, ``bf16``, ``auto``).

    On CUDA: ``fp16`` or ``bf16`` as asked; ``auto`` is bf16 where the GPU supports it, else fp16.
    On a CPU (no CUDA device): ``bf16`` is CPU autocast (``bf16`` with ``use_cpu``: the trainer runs
    the forward under ``torch.autocast("cpu", torch.bfloat16)``, weights and optimizer stay fp32),
    a warning where the CPU lacks bf16 instructions; ``fp16`` is a ``ValueError`` (the trainer has no
    CPU fp16 autocast); ``auto`` is fp32 (``{}``), or bf16 on a bf16 CPU once
    :data:`AUTO_BF16_ON_CPU` is set. On Apple's MPS, fp16 and bf16 are refused as before."""
    if mixed_precision == "no":
        return {}
    import torch

    if torch.cuda.is_available():
        if mixed_precision == "auto":
            return {"bf16": True} if torch.cuda.is_bf16_supported() else {"fp16": True}
        return {mixed_precision: True}
    if mixed_precision == "auto":
        return {"bf16": True, "use_cpu": True} if AUTO_BF16_ON_CPU and cpu_supports_bf16() else {}
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        raise ValueError(f"mixed_precision: {mixed_precision!r} needs a CUDA device; use 'no' or 'auto' on MPS")
    if mixed_precision == "fp16":
        raise ValueError("mixed_precision: 'fp16' needs a CUDA device (there is no fp16 training on a CPU); "
                         "use 'bf16', 'no' or 'auto' on a CPU")
    if not cpu_supports_bf16():
        _warn_emulated_bf16()
    return {"bf16": True, "use_cpu": True}


def check_run_inputs(recipe: TrainingRecipe) -> LossEntry:
    """The loss and its options, the data root, the data sets and their formats (and for
    ``corpus_negatives`` that they are retrieval sets), the tasks, the precision. The fields
    themselves are checked when the recipe is built (:meth:`TrainingRecipe.validate`), the model and
    the output folder by the caller. Returns the loss's registry entry."""
    from contrastive_bert.data import resolve_data_dir
    from contrastive_bert.evaluation.tasks import check_tasks
    from contrastive_bert.training.train_data import check_train_datasets

    entry = get_loss_entry(recipe.loss)
    entry.check_options(recipe.loss_options)
    resolve_data_dir(recipe.data_dir)
    check_train_datasets(recipe.datasets, entry.data_format, recipe.labelled_negatives)
    if recipe.corpus_negatives is not None:
        from contrastive_bert.training.corpus_negatives import check_corpus_negative_datasets

        check_corpus_negative_datasets(recipe.datasets, entry.data_format)
    if recipe.eval_tasks:
        check_tasks(recipe.eval_tasks)
    if recipe.dev_task:
        check_tasks([recipe.dev_task])
    precision_flags(recipe.mixed_precision)
    return entry
