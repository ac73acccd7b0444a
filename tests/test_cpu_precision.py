"""bf16 training on a CPU: the trainer flags of every precision on CUDA and on a CPU (with and
without bf16 instructions), the CPU's bf16 check, and two optimizer steps of a tiny BERT whose
forward really runs in bf16 (its matrix products' outputs are bf16) while its weights stay fp32."""

from __future__ import annotations

import logging

import datasets
import pytest
import torch

from contrastive_bert.training import checks
from contrastive_bert.training.checks import cpu_flags, precision_flags


@pytest.fixture()
def machine(monkeypatch):
    """Set what the flags depend on: ``machine(cuda=..., cuda_bf16=..., cpu_bf16=..., auto_cpu=...)``."""
    def set_up(cuda: bool = False, cuda_bf16: bool = True, cpu_bf16: bool = True, auto_cpu: bool = False, mps: bool = False):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: cuda_bf16)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
        monkeypatch.setattr(checks, "cpu_supports_bf16", lambda: cpu_bf16)
        monkeypatch.setattr(checks, "AUTO_BF16_ON_CPU", auto_cpu)
    return set_up


@pytest.mark.parametrize("setup, asked, flags", [
    ({"cuda": True}, "no", {}),
    ({"cuda": True}, "fp16", {"fp16": True}),
    ({"cuda": True}, "bf16", {"bf16": True}),
    ({"cuda": True}, "auto", {"bf16": True}),
    ({"cuda": True, "cuda_bf16": False}, "auto", {"fp16": True}),
    ({}, "no", {}),
    ({}, "bf16", {"bf16": True, "use_cpu": True}),
    ({"cpu_bf16": False}, "bf16", {"bf16": True, "use_cpu": True}),
    ({}, "auto", {}),  # fp32 on a CPU until the benchmark says otherwise
    ({"cpu_bf16": False}, "auto", {}),
    ({"auto_cpu": True}, "auto", {"bf16": True, "use_cpu": True}),
    ({"auto_cpu": True, "cpu_bf16": False}, "auto", {}),
])
def test_the_trainer_flags_of_each_precision(machine, setup, asked, flags):
    machine(**setup)
    assert precision_flags(asked) == flags


def test_fp16_on_a_cpu_is_refused_with_what_to_use(machine):
    machine()
    with pytest.raises(ValueError, match=r"mixed_precision: 'fp16' needs a CUDA device .*use 'bf16', 'no' or 'auto' on a CPU"):
        precision_flags("fp16")


@pytest.mark.parametrize("asked", ["fp16", "bf16"])
def test_mps_keeps_refusing_mixed_precision(machine, asked):
    machine(mps=True)
    with pytest.raises(ValueError, match=rf"mixed_precision: '{asked}' needs a CUDA device; use 'no' or 'auto' on MPS"):
        precision_flags(asked)


def test_bf16_on_a_cpu_without_bf16_instructions_warns_once(machine, caplog):
    machine(cpu_bf16=False)
    checks._warn_emulated_bf16.cache_clear()
    with caplog.at_level(logging.WARNING, logger=checks.__name__):
        precision_flags("bf16")
        precision_flags("bf16")  # the check and the trainer both ask: one warning
    assert [r.getMessage() for r in caplog.records].count(
        "mixed_precision: this CPU has no bf16 instructions (avx512_bf16 or amx_bf16): bf16 runs emulated and is likely slower "
        "than fp32 ('no')") == 1


def test_cpu_flags_read_x86_and_arm_cpuinfo(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nmodel name\t: Xeon\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n\n"
                   "processor\t: 1\nflags\t\t: fpu\n")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd bf16 sve\n")
    assert cpu_flags(x86) == {"fpu", "avx2", "avx512f", "avx512_bf16", "amx_bf16"}  # the first processor's
    assert cpu_flags(arm) == {"fp", "asimd", "bf16", "sve"}
    assert cpu_flags(tmp_path / "missing") == frozenset()


@pytest.mark.parametrize("torch_says, flags, expected", [
    ({"_is_avx512_bf16_supported": True}, set(), True),
    ({"_is_amx_tile_supported": True}, set(), True),
    ({}, {"avx512f", "amx_bf16"}, True),
    ({}, {"avx512f", "avx512_bf16"}, True),
    ({}, {"avx2", "avx512f"}, False),  # AVX-512 alone: bf16 only emulated
])
def test_cpu_supports_bf16_from_torch_or_the_flags(monkeypatch, torch_says, flags, expected):
    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        said = torch_says.get(name, False)
        monkeypatch.setattr(torch.cpu, name, lambda said=said: said, raising=False)
    monkeypatch.setattr(checks, "cpu_flags", lambda: frozenset(flags))
    checks.cpu_supports_bf16.cache_clear()
    try:
        assert checks.cpu_supports_bf16() is expected
    finally:
        checks.cpu_supports_bf16.cache_clear()


def test_cpu_supports_bf16_survives_a_failing_private_torch_check(monkeypatch):
    def broken():
        raise RuntimeError("not on this build")

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", broken, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", broken, raising=False)
    monkeypatch.setattr(checks, "cpu_flags", lambda: frozenset({"amx_bf16"}))
    checks.cpu_supports_bf16.cache_clear()
    try:
        assert checks.cpu_supports_bf16() is True
    finally:
        checks.cpu_supports_bf16.cache_clear()


@pytest.mark.parametrize("precision, dtype", [("bf16", torch.bfloat16), ("no", torch.float32)])
def test_two_steps_of_a_tiny_bert_train_with_its_forward_in_the_precision_asked(tiny_model, tmp_path, monkeypatch, precision, dtype):
    """Through the package's ``fit``: every linear layer of the encoder returns ``dtype`` during
    training (CPU autocast in bf16), the weights stay fp32, and both steps are taken."""
    from contrastive_bert.training import TrainingRecipe, fit, get_loss_entry

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the CPU path, on any machine
    rows = datasets.Dataset.from_dict({"anchor": [f"question {i}" for i in range(8)], "positive": [f"answer {i}" for i in range(8)]})
    recipe = TrainingRecipe(max_steps=2, batch_size=4, dev_task=None, eval_tasks=[], save_steps=10**6, eval_steps=10**6,
                            max_seq_length=32, mixed_precision=precision)
    loss = get_loss_entry("mnrl").build(tiny_model, rows, recipe)
    seen: list[tuple[torch.dtype, bool]] = []
    linears = [m for m in tiny_model[0].auto_model.encoder.modules() if isinstance(m, torch.nn.Linear)]
    handles = [m.register_forward_hook(lambda module, args, out: seen.append((out.dtype, torch.is_autocast_enabled("cpu"))))
               for m in linears]
    try:
        trainer = fit(tiny_model, rows, loss, recipe, str(tmp_path / "run"))
    finally:
        for handle in handles:
            handle.remove()
    assert trainer.state.global_step == 2
    assert len(seen) >= 2 * 2 * len(linears)  # 2 steps x 2 columns x every linear layer (+ the model card's examples)
    assert {d for d, _ in seen} == {dtype} and {on for _, on in seen} == {precision == "bf16"}
    assert all(p.dtype == torch.float32 for p in tiny_model.parameters())
    assert trainer.args.use_cpu is (precision == "bf16") and trainer.args.bf16 is (precision == "bf16")
    # after fit, the model encodes in fp32 again (accelerate's autocast wrapper of forward is removed)
    after: list[tuple[torch.dtype, bool]] = []
    handles = [m.register_forward_hook(lambda module, args, out: after.append((out.dtype, torch.is_autocast_enabled("cpu"))))
               for m in linears]
    try:
        embeddings = tiny_model.encode(["a question", "an answer"], convert_to_tensor=True)
    finally:
        for handle in handles:
            handle.remove()
    assert after and {d for d, _ in after} == {torch.float32} and {on for _, on in after} == {False}
    assert embeddings.dtype == torch.float32
