"""Where a micro-batch stands in its optimizer step, as the trainer tells it.

Under ``gradient_accumulation_steps = k`` a loss is called k times per optimizer step. What must
happen once a step (a momentum encoder's EMA update, a step counter, clearing a per-step memory
bank, ACL-Grad's decision) reads this signal instead of counting calls.
"""

from __future__ import annotations

__all__ = ["is_optimizer_sync_step"]


def is_optimizer_sync_step() -> bool:
    """True on the last micro-batch of an optimizer step (accelerate's ``sync_gradients``, which
    the transformers trainer sets before each micro-batch); True outside an accelerate-driven loop."""
    try:
        from accelerate.state import GradientState
    except ImportError:  # pragma: no cover - accelerate is a dependency of the trainer
        return True
    state = GradientState._shared_state
    return bool(state.get("sync_gradients", True)) if state else True
