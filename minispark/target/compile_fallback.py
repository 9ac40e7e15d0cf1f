"""``torch.compile`` where it works, eager with a one-line notice where it cannot.

Training's ``compile = true`` (the ``rtx3050`` recipe) and the target's ``--runtime compiled`` need
inductor's toolchain: Triton for a CUDA device (not
shipped for Windows: ``triton-windows`` is a separate package), a C++ compiler for a CPU. Without it
``torch.compile`` fails at the first call, deep inside a training step. :func:`compile_unavailable`
says up front why compiling cannot work here (or None), and :func:`compile_or_eager` then returns the
eager function with one warning line (a ``notice:`` in the CLI); where the toolchain is present but
compiling the first call still fails (an unsupported op, a broken install), that call and every later
one run eagerly, with the same one line. Compiled and eager compute the same losses
(``tests/training/test_train.py::test_compiled_training_matches_eager``), as do compiled and eager decoding
steps (``tests/target/test_compiled_runtime.py``).

    .venv/bin/python -m pytest -q tests/target/test_compile_fallback.py
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable

import torch


def compile_unavailable(device: torch.device | str) -> str | None:
    """Why ``torch.compile`` (inductor) cannot compile for ``device`` here, or None when it can."""
    try:
        import torch._dynamo

        if not torch._dynamo.is_dynamo_supported():
            return "torch.compile does not support this Python / platform"
    except Exception as exc:  # an incomplete torch build: any failure means "cannot compile"
        return f"torch.compile is unavailable ({type(exc).__name__})"
    if torch.device(device).type == "cuda":
        from torch.utils._triton import has_triton

        return None if has_triton() else "Triton is not installed (on Windows: pip install triton-windows)"
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        get_cpp_compiler()
    except Exception:  # no compiler found: inductor raises its own error types for that
        return "no C++ compiler found for inductor's CPU code (install g++ or clang, or set $CXX)"
    return None


def _compile_errors() -> tuple[type[BaseException], ...]:
    """The exception types a failed compilation raises (those this torch build has)."""
    import torch._dynamo.exc as dynamo
    import torch._inductor.exc as inductor

    names = ((dynamo, "BackendCompilerFailed"), (dynamo, "TritonUnavailableError"), (inductor, "InductorError"),
             (inductor, "CppCompileError"), (inductor, "CUDACompileError"))
    return tuple(getattr(module, name) for module, name in names if hasattr(module, name))


def compile_or_eager(fn: Callable, device: torch.device | str, what: str = "training", flag: str = "compile = true",
                     **options: Any) -> Callable:
    """``torch.compile(fn, **options)``, or ``fn`` itself with one warning when compiling cannot work on
    ``device``; a compiled function whose first compilation fails falls back to ``fn`` (one warning).
    ``flag`` names the setting that asked for compiling in those warnings."""
    reason = compile_unavailable(device)
    if reason is not None:
        warnings.warn(f"{flag}: {reason}; {what} runs eagerly (same results, slower)", stacklevel=2)
        return fn
    compiled = torch.compile(fn, **options)
    state = {"eager": False}

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if state["eager"]:
            return fn(*args, **kwargs)
        try:
            return compiled(*args, **kwargs)
        except _compile_errors() as exc:
            state["eager"] = True
            first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
            warnings.warn(f"{flag}: compiling failed ({first}); {what} runs eagerly (same results, slower)",
                          stacklevel=2)
            return fn(*args, **kwargs)

    return run
