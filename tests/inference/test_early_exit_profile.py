"""The batch-1 profile of early exit lives in the package: it times every piece on a tiny
multi-exit model and leaves the model as it found it; eval/profile_early_exit.py is a thin script
over it, and no script of eval/ puts eval/ on ``sys.path`` to import a sibling."""

from __future__ import annotations

from pathlib import Path

import torch
from bench_modules import EVAL, load_bench

from contrastive_bert.heads.exits import add_exit_heads, get_exit_heads
from contrastive_bert.inference.early_exit_profile import PieceTimer, profile

TEXTS = [" ".join(["word"] * n) for n in (1, 7, 3, 12, 2, 5)]


def test_piece_timer_counts_only_the_outermost_piece():
    timer = PieceTimer()
    inner = timer.wrap("inner", lambda: 1)
    outer = timer.wrap("outer", lambda: inner() + 1)
    assert outer() == 2 and inner() == 1
    assert dict(timer.calls) == {"outer": 1, "inner": 1}


def test_profile_times_every_piece_and_restores_the_model(tmp_path):
    from conftest import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny4", num_layers=4)
    torch.manual_seed(0)
    add_exit_heads(model, ["a", "b", "c"], exit_layers=[1, 2, 3], head_type="mha")
    model.eval()
    out = profile(model, TEXTS, "margin", 0.0)
    assert out["sentences"] == len(TEXTS) and out["avg_layers"] == 1.0  # margin 0: every row leaves at the first exit
    assert {"tokenise", "embed", "mask", "layer_1", "head_1", "decision"} <= set(out["pieces_ms"])
    assert "hf_forward_all_layers" in out["full_pieces_ms"] and "cprofile_top" not in out
    heads = get_exit_heads(model)
    assert "forward_layer" not in vars(heads) and "forward" not in vars(model[0].auto_model)  # the own methods again


def test_the_script_calls_the_package_function_and_no_script_edits_sys_path():
    assert load_bench("profile_early_exit").profile is profile
    edits = [path.name for path in sorted(Path(EVAL).glob("*.py")) if "sys.path" in path.read_text(encoding="utf-8")]
    assert not edits, f"these eval/ scripts edit sys.path (move what they share into the package): {edits}"
