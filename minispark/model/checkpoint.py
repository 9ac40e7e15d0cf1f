"""Saving, copying and loading drafters: the weights and calibration of a drafter directory (what the
directory holds, and which layout it is in: :mod:`minispark.model.drafter_dir`).

Every write is atomic (a reader sees the old directory or the complete new one). Loading refuses a
drafter trained for another target, and a calibration fitted for another target; a calibration
fitted at other sampling settings loads with a one-line warning. A directory in DeepSpec's layout
(``Qwen3DSparkModel``, see :mod:`minispark.model.deepspec`) loads too.

    .venv/bin/python -m pytest -q tests/model/test_draft_model.py -k checkpoint
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import Callable

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from minispark.core.atomic import write_dir_atomic
from minispark.model.calibration import Calibration
from minispark.model.deepspec import load_deepspec_model
from minispark.model.draft_config import DraftConfig
from minispark.model.draft_model import DraftModel
from minispark.model.drafter_dir import (CALIBRATION_FILE, CONFIG_FILE, DEEPSPEC, DRAFTER_FILES, WEIGHTS_FILE,
                                         DrafterDir, OpenDrafter, calibration_paths, read_calibrations,
                                         read_drafter_dir)
from minispark.core.errors import MinisparkError, first_line
from minispark.core.identity import same_target
from minispark.target.sampling import SamplingConfig

#: Weights shared with the target and never stored: the frozen embedding and lm_head.
FROZEN = ("embed_tokens.", "lm_head.")
#: The Markov head's tables over the draft vocabulary: W1 (N + 1, r) by previous token, W2 (N, r) to the logits.
MARKOV_W1, MARKOV_W2 = "markov.markov_w1.weight", "markov.markov_w2.weight"


def trainable_weights(model: DraftModel) -> dict[str, torch.Tensor]:
    """The weights a checkpoint stores: everything but the frozen embedding and lm_head."""
    return {k: v for k, v in model.state_dict().items() if not k.startswith(FROZEN)}


def save_drafter(model: DraftModel, path: str | Path, config: DraftConfig | None = None,
                 extra: Callable[[Path], None] | None = None, by: str | None = None) -> Path:
    """Write ``config.json`` (``config``, default the model's) + ``model.safetensors`` to ``path``
    atomically; ``extra(tmp)`` adds files (a trainer's state) before the directory appears; ``by``: the
    command writing it, which alone may replace it later (``atomic.write_dir_atomic``)."""

    def fill(tmp: Path) -> None:
        (config or model.config).save(tmp / CONFIG_FILE)
        weights = {k: v.detach().contiguous().cpu() for k, v in trainable_weights(model).items()}
        save_file(weights, str(tmp / WEIGHTS_FILE), metadata={"target": model.config.target})
        if extra is not None:
            extra(tmp)

    return write_dir_atomic(path, fill, by)


def copy_drafter(source: str | Path, dest: str | Path, weight_dtype: torch.dtype | None = None,
                 extra: Callable[[Path], None] | None = None) -> Path:
    """Copy a drafter's files (config, weights, calibration and target record if any) to ``dest``
    atomically; ``weight_dtype`` recasts the floating-point weights (the loader casts them back to the
    config's compute dtype), e.g. bf16 to ship a drafter small; ``extra(tmp)`` adds files before the
    directory appears."""
    source = Path(source)

    def fill(tmp: Path) -> None:
        if extra is not None:
            extra(tmp)
        for name in DRAFTER_FILES:
            if name != WEIGHTS_FILE and (source / name).is_file():
                shutil.copy2(source / name, tmp / name)
        for path in calibration_paths(source):  # the ones fitted at other temperatures too
            if path.name != CALIBRATION_FILE and path.is_file():
                shutil.copy2(path, tmp / path.name)
        if weight_dtype is None:
            shutil.copy2(source / WEIGHTS_FILE, tmp / WEIGHTS_FILE)
            return
        with safe_open(str(source / WEIGHTS_FILE), framework="pt") as handle:
            metadata = handle.metadata()
            weights = {k: handle.get_tensor(k) for k in handle.keys()}
        cast = {k: v.to(weight_dtype) if v.is_floating_point() else v for k, v in weights.items()}
        save_file(cast, str(tmp / WEIGHTS_FILE), metadata=metadata)

    return write_dir_atomic(dest, fill)


def read_weights(path: str | Path, device: torch.device | str,
                 dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The tensors stored in ``path/model.safetensors``; an unreadable (truncated) file is a one-line error.

    With ``dtype`` the floating-point tensors arrive in it: each is read on the host and converted before it
    moves to ``device``, one at a time, so neither the device nor the host holds the stored (fp32) copy of
    the whole drafter on the way."""
    file = Path(path) / WEIGHTS_FILE
    try:
        if dtype is None:
            return load_file(str(file), device=str(device))
        weights = {}
        with safe_open(str(file), framework="pt", device="cpu") as handle:
            for key in handle.keys():
                tensor = handle.get_tensor(key)
                weights[key] = (tensor.to(dtype) if tensor.is_floating_point() else tensor).to(device)
        return weights
    except (SafetensorError, OSError) as exc:
        reason = first_line(exc)
        raise MinisparkError(f"{file}: unreadable safetensors ({reason}); a truncated or interrupted copy?") from None


def apply_weights(model: DraftModel, weights: dict[str, torch.Tensor], path: str | Path) -> None:
    """Load stored ``weights`` into ``model`` (frozen weights excepted); a mismatch is a one-line
    error naming ``path``'s weights file."""
    state = model.state_dict()
    for key, tensor in weights.items():
        if key not in state:
            continue
        if tensor.shape != state[key].shape:
            raise MinisparkError(f"{Path(path) / WEIGHTS_FILE}: weight {key!r} has shape {list(tensor.shape)}, its "
                                 f"config.json makes it {list(state[key].shape)} (weights and config of two drafters?)")
        if tensor.is_floating_point() != state[key].is_floating_point():  # load_state_dict would cast it silently
            raise MinisparkError(f"{Path(path) / WEIGHTS_FILE}: weight {key!r} is stored as {tensor.dtype}, not as "
                                 f"{'a floating-point' if state[key].is_floating_point() else 'an integer'} tensor; "
                                 "a damaged or hand-made file?")
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():  # confidences of NaN later: a traceback
            raise MinisparkError(f"{Path(path) / WEIGHTS_FILE}: weight {key!r} holds NaN or infinite values (a "
                                 "diverged training run, or a damaged file); use another checkpoint")
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if not k.startswith(FROZEN)]
    if missing or unexpected:
        raise MinisparkError(f"{Path(path) / WEIGHTS_FILE} does not match its config: missing {missing}, "
                             f"unexpected {unexpected}")


def init_from_config(path: str | Path) -> tuple[Path, DraftConfig]:
    """The drafter directory ``init_from`` names and its config, a refusal one line naming init_from (a target's
    directory there passed --dry-run, then was a ValueError traceback from inside the trainer)."""
    found = read_drafter_dir(path)
    if found.raw is None:
        raise MinisparkError(f"init_from: {found.path} is not a drafter directory (no {CONFIG_FILE})")
    try:
        return found.path, found.draft_config()
    except ValueError as exc:
        raise MinisparkError(f"init_from: {found.path}: {exc}") from None


def drafter_vocab(path: str | Path, draft_vocab: int) -> torch.Tensor:
    """(n,) the draft vocabulary of the drafter at ``path`` (``init_from``): a warm start keeps it (``draft_vocab``
    = n) or grows it (> n); one with none, or a larger one, is refused in one line."""
    path, config = init_from_config(path)
    if not config.draft_vocab or not draft_vocab or draft_vocab < config.draft_vocab:
        raise MinisparkError(f"init_from: {path / CONFIG_FILE}: draft_vocab is {config.draft_vocab}, this run's is "
                             f"{draft_vocab} (a warm start keeps its source's draft vocabulary or grows it)")
    return read_weights(path, "cpu")["vocab_ids"].long()


def widen_vocab(weights: dict[str, torch.Tensor], config: DraftConfig, vocab_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Stored ``weights`` of a drafter over its draft vocabulary re-laid over ``vocab_ids`` (N',), which holds it.

    Each kept token's Markov rows move to its new index. A new token's W1 row is the shared row of the tokens
    outside the old vocabulary (what it was before) and its W2 row zero (no Markov bias: the target's lm_head
    row alone scores it), so the widened drafter gives every old token the logit it gave before."""
    old = weights["vocab_ids"].long()  # (N,)
    where = torch.full((config.vocab_size,), -1, dtype=torch.long)
    where[vocab_ids.long().cpu()] = torch.arange(vocab_ids.numel())
    moved = where[old.cpu()]  # (N,) each old token's new index
    if bool((moved < 0).any()):
        raise ValueError("the new draft vocabulary must hold the old one")
    out = dict(weights, vocab_ids=vocab_ids.to(old.device, old.dtype))
    w2 = weights[MARKOV_W2]  # (N, r)
    out[MARKOV_W2] = w2.new_zeros((vocab_ids.numel(), w2.shape[1]))
    out[MARKOV_W2][moved.to(w2.device)] = w2
    if config.markov_w1 == "table":
        w1 = weights[MARKOV_W1]  # (N + 1, r): the last row is every token outside the vocabulary
        out[MARKOV_W1] = w1[-1:].repeat(vocab_ids.numel() + 1, 1)
        out[MARKOV_W1][moved.to(w1.device)] = w1[:-1]
    return out


def start_from_drafter(model: DraftModel, path: str | Path, expected: DraftConfig) -> str:
    """Load the trainable weights of the drafter at ``path`` into ``model`` to continue training it;
    its architecture must equal ``expected``'s and its draft vocabulary be the model's or inside it (a grown
    vocabulary: :func:`widen_vocab`), else a one-line error naming the first difference. Returns the target the
    source was trained for: a warm start may adapt a drafter to another target of the same shapes (a fine-tuned
    one)."""
    path, config = init_from_config(path)
    for name, value in vars(config).items():
        # the compute dtype is how a run computes, not what it learned: bf16-trained weights go on in fp32;
        # a draft vocabulary may grow (drafter_vocab checked its size)
        if name not in ("dtype", "draft_vocab", "target") and value != getattr(expected, name):
            raise MinisparkError(f"init_from: {path / CONFIG_FILE}: {name} is {value!r}, this run's is "
                                 f"{getattr(expected, name)!r}")
    weights = read_weights(path, next(model.parameters()).device)
    if config.draft_vocab and not torch.equal(weights["vocab_ids"].cpu(), model.vocab_ids.cpu()):
        try:
            weights = widen_vocab(weights, config, model.vocab_ids)
        except ValueError:
            raise MinisparkError(f"init_from: {path / WEIGHTS_FILE}: its draft vocabulary is not inside this run's "
                                 "(train on the answers it was trained on, or grow draft_vocab)") from None
    apply_weights(model, weights, path)
    return config.target


def load_draft_model(
    path: str | Path | DrafterDir,
    target_embed: torch.Tensor,
    target_lm_head: torch.Tensor,
    device: torch.device | str,
    target_identity: str | None = None,
) -> DraftModel:
    """Rebuild a :class:`DraftModel` from a drafter directory (``path``, or the :class:`DrafterDir` read from
    it) and the target's frozen weights.

    ``target_identity``, when given, must equal the identity the drafter was trained against; a
    DeepSpec-layout directory records no identity and is checked by shapes (it is given this one)."""
    found = read_drafter_dir(path)
    if found.kind == DEEPSPEC:
        return load_deepspec_model(found, target_embed, target_lm_head, device, target=target_identity or "deepspec")
    path, config = found.path, found.draft_config()
    if target_identity is not None and not same_target(config.target, target_identity):
        raise MinisparkError(f"drafter {path} was trained for target {config.target!r}, not {target_identity!r}")
    weights = read_weights(path, device, config.torch_dtype)  # on the device in their final dtype
    vocab_ids = weights.get("vocab_ids") if config.draft_vocab else None  # which lm_head rows to take
    # The target's own embedding and lm_head tensors when device and dtype fit (no second copy; from_target)
    model = DraftModel.from_target(config, target_embed.to(device), target_lm_head.to(device), vocab_ids)
    apply_weights(model, weights, path)
    return model


def sampling_record(sampling: SamplingConfig) -> dict[str, float | int]:
    """The sampling settings a calibration is fitted for, as stored in ``calibration.json``."""
    return {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k}


def load_calibration(drafter: str | Path | OpenDrafter, target_identity: str | None = None,
                     sampling: SamplingConfig | None = None) -> tuple[Calibration | None, str | None]:
    """The drafter's STS calibration fitted nearest the request's temperature (``calibration.json`` at T 0,
    ``calibration-t{T}.json`` at others; None without any) and a one-line warning when even that one was
    fitted far from ``sampling`` (more than ``CALIBRATION_NEAR`` in temperature, or other top-p / top-k).
    A calibration fitted for another target than ``target_identity`` is refused. Files written before these
    fields existed record neither and are taken as they are. ``drafter``: a drafter directory, or an opened
    drafter (its calibrations are read already)."""
    from minispark.core.defaults import CALIBRATION_NEAR

    if isinstance(drafter, OpenDrafter):
        drafter_dir, calibrations = drafter.directory, drafter.calibrations
    else:
        drafter_dir, calibrations = Path(drafter), read_calibrations(drafter)
    if not calibrations:
        return None, None
    want = sampling.temperature if sampling is not None else 0.0
    path, calibration = min(calibrations, key=lambda pc: abs(pc[1].sampling.get("temperature", 0.0) - want))
    if target_identity is not None and calibration.target_identity \
            and not same_target(calibration.target_identity, target_identity):
        raise MinisparkError(f"{path} was fitted for target {calibration.target_identity!r}, not "
                             f"{target_identity!r}; re-run `minispark calibrate`")
    warning = None
    fitted = calibration.sampling
    if sampling is not None and fitted and (abs(fitted.get("temperature", 0.0) - want) > CALIBRATION_NEAR
                                            or {k: v for k, v in fitted.items() if k != "temperature"}
                                            != {k: v for k, v in sampling_record(sampling).items() if k != "temperature"}):
        warning = _other_settings_notice(Path(drafter_dir), path, fitted, sampling)
    return calibration, warning


def _other_settings_notice(drafter_dir: Path, path: Path, fitted: dict, sampling: SamplingConfig) -> str:
    """The notice for a calibration fitted at other sampling settings, with a calibrate command that runs (on
    corpus prompts the shipped drafters never trained on, never the held-out set the bench measures): a shipped
    drafter is never rewritten, so its notice calibrates a copy."""
    from minispark.core.defaults import CALIBRATION_PROMPTS, SHIPPED_DRAFTERS

    flags = f"--temperature {sampling.temperature:g}"
    flags += f" --top-p {sampling.top_p:g}" if sampling.top_p != 1.0 else ""
    flags += f" --top-k {sampling.top_k}" if sampling.top_k else ""
    shipped = SHIPPED_DRAFTERS.resolve() in drafter_dir.resolve().parents
    quoted = shlex.quote(str(drafter_dir))
    where, fit = (("the shipped drafter's calibration", f"cp -rL {quoted} my-drafter && minispark calibrate "
                   "--drafter my-drafter") if shipped else
                  (str(path), f"minispark calibrate --drafter {quoted}"))
    return (f"{where} was fitted at {', '.join(f'{k} {v:g}' for k, v in fitted.items())}: at these settings its "
            f"confidences may be off, which changes only how many tokens are drafted, never the output; to fit "
            f"them: {fit} --prompts {shlex.quote(str(CALIBRATION_PROMPTS))} {flags}")
