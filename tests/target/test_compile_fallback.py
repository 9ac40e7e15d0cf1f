"""Compile where it works: without Triton (CUDA) or a C++ compiler (CPU) ``compile = true`` runs eagerly
with one notice line, and a compilation that fails at the first call falls back the same way; the
training run then gives the eager losses.

    .venv/bin/python -m pytest -q tests/target/test_compile_fallback.py
"""

from __future__ import annotations

import warnings

import pytest
import torch

from minispark.target import compile_fallback
from minispark.target.compile_fallback import compile_or_eager, compile_unavailable


def square(x: torch.Tensor) -> torch.Tensor:
    return x * x


def test_missing_triton_is_named_for_cuda(monkeypatch):
    import torch.utils._triton

    monkeypatch.setattr(torch.utils._triton, "has_triton", lambda: False)
    assert "Triton is not installed" in compile_unavailable("cuda")


def test_missing_compiler_returns_eager_with_one_notice(monkeypatch):
    import torch._inductor.cpp_builder

    def no_compiler() -> str:
        raise RuntimeError("no working C++ compiler found")

    monkeypatch.setattr(torch._inductor.cpp_builder, "get_cpp_compiler", no_compiler)
    assert "C++ compiler" in compile_unavailable("cpu")
    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("compile must not be called"))
    with pytest.warns(UserWarning, match=r"compile = true: no C\+\+ compiler .* runs eagerly") as seen:
        fn = compile_or_eager(square, "cpu")
    assert fn is square and len(seen) == 1


def test_failing_first_compilation_falls_back_once(monkeypatch):
    from torch._dynamo.exc import BackendCompilerFailed

    calls = []

    def broken(*_args, **_kwargs):
        calls.append(1)
        error = BackendCompilerFailed.__new__(BackendCompilerFailed)  # its __init__ wants dynamo's internals
        Exception.__init__(error, "backend='inductor' raised: Cannot find a working triton installation")
        raise error

    monkeypatch.setattr(compile_fallback, "compile_unavailable", lambda device: None)
    monkeypatch.setattr(torch, "compile", lambda fn, **_: broken)
    fn = compile_or_eager(square, "cpu", dynamic=True)
    x = torch.arange(4.0)
    with pytest.warns(UserWarning, match="compiling failed") as seen:
        assert torch.equal(fn(x), x * x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second notice, no second try
        assert torch.equal(fn(x), x * x)
    assert len(seen) == 1 and calls == [1]


def test_training_with_compile_unavailable_runs_eagerly(cache, target, tmp_path, monkeypatch):
    from minispark.training.recipes import load_recipe
    from minispark.training.train import train

    eager = train(load_recipe("tiny", ["steps=2"]), cache, tmp_path / "eager", target=target, log=None).losses
    monkeypatch.setattr(compile_fallback, "compile_unavailable", lambda device: "no C++ compiler found (test)")
    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("compile must not be called"))
    with pytest.warns(UserWarning, match="runs eagerly"):
        compiled = train(load_recipe("tiny", ["steps=2", "compile=true"]), cache, tmp_path / "compiled",
                         target=target, log=None).losses
    assert compiled == eager
