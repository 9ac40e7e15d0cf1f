"""DeepSpec's checkpoint layout for DSpark and DFlash drafters (``Qwen3DSparkModel``, told apart from
minispark's by :func:`~minispark.model.drafter_dir.read_drafter_dir`): config and weight-name mapping in
both directions, and loading such a directory into a
:class:`~minispark.model.draft_model.DraftModel` that behaves as DeepSpec's model does.

DeepSpec saves drafters with HF ``save_pretrained``: ``config.json`` is the target's text config plus
``architectures: ["Qwen3DSparkModel"]``, ``num_hidden_layers`` (draft layers), ``num_target_layers``,
``block_size``, ``mask_token_id``, ``target_layer_ids``, ``num_anchors``, ``layer_types``,
``enable_confidence_head`` [, ``confidence_head_with_markov``], ``markov_rank`` [,
``markov_head_type``]; weights carry no ``model.`` prefix. A DFlash checkpoint is the same class
with ``markov_rank`` 0 and no confidence head.

How minispark's DraftModel relates to DeepSpec's (deepspec/modeling/dspark/qwen3/modeling.py,
markov_head.py, eval/dspark/draft_ops.py, read for this module):

* same: block ``[anchor, MASK×(γ−1)]`` at positions ``anchor_pos + [0..γ−1]``, slot k predicting
  ``anchor_pos + k + 1``; context ``hidden_norm(fc(concat features))`` in ascending layer order,
  the feature of layer id being decoder layer id's output (HF ``hidden_states[id + 1]``), which is
  what minispark's hooks capture; per-layer k/v projections of the context with k_norm and RoPE on
  K, no input norm on the context and no norm on V; bidirectional block; the Markov/RNN bias added
  to the base logits before the temperature; confidence ``σ(proj([h_k after the final norm ;
  W1[x_{k−1}]]))`` (DeepSpec computes it after the block is sampled, minispark before x_k is drawn:
  the values are identical, both depend on x_{k−1} only).
* loop: DeepSpec's first anchor is the token sampled by the prefill, minispark's is the last prompt
  token (so its first round drafts that token too); from then on both keep the features of every
  committed token but the anchor as context. Verification is the same residual rule.
* window: DeepSpec's first drafters attend the whole context (training mask ``kv < anchor``); later ones
  and the engines (vLLM's ``dflash_config.use_swa`` / ``swa_window_size``, HF's ``sliding_window`` on
  ``sliding_attention`` layers) attend a per-query sliding window S. An export writes S = W + γ (the block's
  last slot sees minispark's W context rows, earlier slots a few more) beside ``minispark_window``; an import
  takes ``minispark_window`` when recorded, else W = S − γ, else 0 (the whole context).
* slots: ``sample_from_anchor`` true (slot k predicts ``anchor_pos + k + 1``) is written explicitly; false
  (DFlash's layout) is refused.
* positions: DeepSpec uses ``arange`` over the token sequence; minispark uses the 1D text positions,
  which are the same for text-only targets (DeepSpec has no vision-language drafter).
* sampling: minispark applies the same top-k/top-p transform to p_d as to p_t; DeepSpec's eval has
  none, so the two agree at top-k 0 and top-p 1.
* refused with a one-line error: ``target_layer_ids`` naming -1 (the embedding output) or the final
  layer (post-norm in HF outputs), ``attention_bias``, mixed ``layer_types``, RoPE scaling,
  any activation but silu, and every mismatch with the target, including a directory minispark
  exported for another target (its ``minispark_target``).
* ``embed_tokens``/``lm_head``: DeepSpec stores frozen copies of the target's; they are used when
  present (as DeepSpec does) and the target's otherwise (as vLLM does).

    .venv/bin/python -m pytest -q tests/model/test_deepspec.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from minispark.model.draft_config import is_kind
from minispark.model.draft_model import DraftConfig, DraftModel
from minispark.model.drafter_dir import DEEPSPEC, WEIGHTS_FILE, DrafterDir, read_drafter_dir
from minispark.core.errors import MinisparkError, option
from minispark.core.identity import DTYPES
from minispark.target.remembered import EXPORTED_TARGET_KEY

ARCHITECTURE = "Qwen3DSparkModel"
INDEX_FILE = "model.safetensors.index.json"
#: Written by minispark's export only: the drafter's training window W (0 = whole context), and the
#: identity of the target it was trained for (refused for any other target).
WINDOW_KEY, TARGET_KEY = "minispark_window", EXPORTED_TARGET_KEY
#: Weights a DeepSpec checkpoint may omit (engines then share the target's).
OPTIONAL_KEYS = ("embed_tokens.weight", "lm_head.weight")
#: minispark module prefix → DeepSpec module prefix; every other name is the same in both.
_PREFIXES = (("markov.", "markov_head."), ("confidence_proj.", "confidence_head.proj."))


def to_deepspec_key(name: str) -> str:
    """minispark state-dict name → DeepSpec name (``markov.x`` → ``markov_head.x``, ...)."""
    for ours, theirs in _PREFIXES:
        if name.startswith(ours):
            return theirs + name[len(ours):]
    return name


def from_deepspec_key(name: str) -> str:
    """DeepSpec weight name → minispark state-dict name (inverse of :func:`to_deepspec_key`)."""
    for ours, theirs in _PREFIXES:
        if name.startswith(theirs):
            return ours + name[len(theirs):]
    return name


def deepspec_dir(path: str | Path | DrafterDir) -> DrafterDir:
    """The drafter directory ``path`` (read unless it already was), refused unless it is in DeepSpec's layout
    (``import`` checks it before loading the target)."""
    found = read_drafter_dir(path)
    if found.kind != DEEPSPEC:
        already = (f"; it is a minispark drafter already: give it to {option('drafter')} as it is"
                   if found.raw is not None and "block_size" in found.raw else "")
        raise MinisparkError(f"{found.path}: not a DeepSpec drafter (config.json must name a DSpark "
                             f"architecture){already}")
    return found


# --------------------------------------------------------------------------------------------
# Config mapping
# --------------------------------------------------------------------------------------------


_REQUIRED = object()


def _field(raw: dict, key: str, where: Path, kind: str = "a whole number", default: Any = _REQUIRED) -> Any:
    """``raw[key]`` (``default`` when absent and one is given; JSON null counts as absent there), refused unless
    it is of ``kind`` (``draft_config.is_kind``): int()/bool() took "1,2", "4" and "no" as numbers and true."""
    if key not in raw and default is _REQUIRED:
        raise MinisparkError(f"{where}: config.json has no {key!r}")
    value = raw.get(key)
    if value is None and default is not _REQUIRED:
        return default
    if not is_kind(value, kind):
        raise MinisparkError(f"{where}: config.json {key} must be {kind}, got {value!r}")
    return value


def _engine_window(raw: dict, num_layers: int, block_size: int, where: Path) -> int:
    """minispark's context window W for a checkpoint whose layers attend a sliding window (0: they attend the whole
    context). The engines' window is per query: with HF's non-causal sliding window of S, the block's last slot
    (at anchor_pos + γ − 1) sees the S − γ context tokens before the anchor, every earlier slot more; minispark's W
    rows are the same for every slot, so W = S − γ, what the last slot sees (the export writes S = W + γ)."""
    layer_types = raw.get("layer_types") or ["full_attention"] * num_layers
    kinds = set(layer_types) if isinstance(layer_types, list) and len(layer_types) == num_layers else None
    if kinds not in ({"full_attention"}, {"sliding_attention"}):
        raise MinisparkError(f"{where}: config.json layer_types {layer_types} is not supported (needs "
                             f"{num_layers} × full_attention or {num_layers} × sliding_attention)")
    dflash = raw.get("dflash_config") or {}
    if not isinstance(dflash, dict):
        raise MinisparkError(f"{where}: config.json dflash_config must be an object, got {dflash!r}")
    if kinds == {"full_attention"} and not dflash.get("use_swa"):
        return 0
    size = dflash.get("swa_window_size") or raw.get("sliding_window")
    if not is_kind(size, "a whole number") or size <= block_size:
        raise MinisparkError(f"{where}: config.json's sliding window {size!r} (dflash_config.swa_window_size or "
                             f"sliding_window) must be a whole number above block_size {block_size}: the block's "
                             "last slot sees that many tokens less the block")
    return size - block_size


def _rope_theta(raw: dict, where: Path) -> float:
    """θ from ``rope_parameters`` (transformers ≥ 5) or top-level ``rope_theta``; scaling refused."""
    rope = raw.get("rope_parameters") or {}
    scaling = raw.get("rope_scaling") or {}
    for name, value in (("rope_parameters", rope), ("rope_scaling", scaling)):
        if not isinstance(value, dict):  # .get on a number or text was an AttributeError traceback
            raise MinisparkError(f"{where}: config.json {name} must be an object, got {value!r}")
    kind = rope.get("rope_type") or rope.get("type") or "default"
    if kind != "default" or (scaling and (scaling.get("rope_type") or scaling.get("type")) != "default"):
        raise MinisparkError(f"{where}: config.json rope scaling {scaling or rope} is not supported "
                             "(default RoPE only)")
    theta = _field(rope, "rope_theta", where, "a finite number", None)
    return float(theta if theta is not None else _field(raw, "rope_theta", where, "a finite number", 10_000.0))


def draft_config_from_deepspec(
    raw: dict,
    where: Path,
    *,
    hidden_size: int,
    vocab_size: int,
    num_target_layers: int | None,
    target: str,
    window: int | None = None,
) -> DraftConfig:
    """The :class:`DraftConfig` of a DeepSpec ``config.json``, checked against the target's sizes.

    ``num_target_layers`` (the target's decoder depth) is checked when known; ``window`` overrides
    the recorded ``minispark_window`` (default: recorded value, else 0 = the whole context)."""
    architectures = raw.get("architectures") or []
    if ARCHITECTURE not in architectures:
        raise MinisparkError(f"{where}: architectures {architectures} is not supported (only {ARCHITECTURE})")
    for key, want in (("hidden_size", hidden_size), ("vocab_size", vocab_size)):
        got = _field(raw, key, where)
        if got != want:
            raise MinisparkError(f"{where}: config.json {key} {got} does not match the target's {want}")
    layers = list(_field(raw, "target_layer_ids", where, "a list of whole numbers"))
    recorded = _field(raw, "num_target_layers", where, default=None)
    if num_target_layers is not None and recorded is not None and recorded != num_target_layers:
        raise MinisparkError(f"{where}: config.json num_target_layers {recorded} does not match the target's "
                             f"{num_target_layers} decoder layers")
    depth = num_target_layers if num_target_layers is not None else recorded
    for layer in layers:
        if layer < 0:
            raise MinisparkError(f"{where}: config.json target_layer_ids has {layer} (the embedding output); "
                                 "minispark captures decoder-layer outputs only")
        if depth is not None and layer >= depth:
            raise MinisparkError(f"{where}: config.json target_layer_ids has {layer}, beyond the target's "
                                 f"{depth} decoder layers")
        if depth is not None and layer == depth - 1:
            raise MinisparkError(f"{where}: config.json target_layer_ids has the final layer {layer}; its HF hidden "
                                 "state is post-norm and differs from the hooked decoder output")
    if any(b <= a for a, b in zip(layers, layers[1:])):
        raise MinisparkError(f"{where}: config.json target_layer_ids {layers} must be strictly increasing")
    num_layers = _field(raw, "num_hidden_layers", where)
    if raw.get("sample_from_anchor", True) is not True:  # DFlash's slots: slot k predicts anchor_pos + k
        raise MinisparkError(f"{where}: config.json sample_from_anchor {raw['sample_from_anchor']!r} is not "
                             "supported (minispark's slot k predicts the token after anchor_pos + k: true)")
    engine_window = _engine_window(raw, num_layers, _field(raw, "block_size", where), where)
    if raw.get("attention_bias"):
        raise MinisparkError(f"{where}: config.json attention_bias true is not supported")
    if raw.get("hidden_act", "silu") != "silu":
        raise MinisparkError(f"{where}: config.json hidden_act {raw['hidden_act']!r} is not supported (silu only)")
    rank = _field(raw, "markov_rank", where)
    head = _field(raw, "markov_head_type", where, "text").lower() if rank > 0 else "none"
    confidence = _field(raw, "enable_confidence_head", where, "true or false")
    with_markov = _field(raw, "confidence_head_with_markov", where, "true or false") if confidence else False
    if with_markov and rank <= 0:
        raise MinisparkError(f"{where}: config.json confidence_head_with_markov needs markov_rank > 0")
    heads = _field(raw, "num_attention_heads", where)
    dtype = str(raw.get("dtype") or raw.get("torch_dtype") or "bfloat16")
    recorded_window = _field(raw, WINDOW_KEY, where, default=engine_window)
    try:
        return DraftConfig(
            target=target, hidden_size=hidden_size, vocab_size=vocab_size, num_heads=heads,
            num_kv_heads=_field(raw, "num_key_value_heads", where, default=0) or heads,
            head_dim=_field(raw, "head_dim", where, default=0) or hidden_size // max(heads, 1),  # 0 heads: refused
            intermediate_size=_field(raw, "intermediate_size", where),
            feature_layers=tuple(layers), mask_token_id=_field(raw, "mask_token_id", where),
            num_layers=num_layers, rms_eps=float(_field(raw, "rms_norm_eps", where, "a finite number", 1e-6)),
            rope_theta=_rope_theta(raw, where), block_size=_field(raw, "block_size", where),
            window=recorded_window if window is None else window, head=head, markov_rank=rank,
            confidence_head=confidence, confidence_with_markov=with_markov, qk_norm=True,
            initializer_range=float(_field(raw, "initializer_range", where, "a finite number", 0.02)),
            dtype=dtype if dtype in DTYPES else "bfloat16")
    except ValueError as exc:
        raise MinisparkError(f"{where}: config.json {exc}") from None


def _window_fields(config: DraftConfig) -> dict:
    """The sliding-window fields of an exported config: S = W + γ when minispark attends W context rows (so the
    block's last slot sees exactly those W, each earlier slot up to γ − 1 more), no window when W is 0."""
    common = {"mask_token_id": config.mask_token_id, "target_layer_ids": list(config.feature_layers)}
    if config.window <= 0:
        return {"layer_types": ["full_attention"] * config.num_layers, "use_sliding_window": False,
                "dflash_config": {**common, "use_swa": False}}
    size = config.window + config.block_size
    return {"layer_types": ["sliding_attention"] * config.num_layers, "use_sliding_window": True,
            "sliding_window": size, "max_window_layers": 0,
            "dflash_config": {**common, "use_swa": True, "swa_window_size": size}}


def deepspec_config_from_draft(config: DraftConfig, target_config: dict, num_target_layers: int) -> dict:
    """The DeepSpec ``config.json`` of a minispark drafter: the target's text config with the draft's
    own sizes and the DSpark fields on top (what ``build_draft_config`` writes)."""
    if not config.qk_norm:
        raise MinisparkError("drafter has qk_norm off; the Qwen3DSparkModel layout always applies q/k RMSNorm")
    drop = ("architectures", "auto_map", "quantization_config", "_name_or_path", "transformers_version",
            "rope_scaling", "sliding_window", "use_sliding_window", "max_window_layers", "layer_types")
    out = {k: v for k, v in target_config.items() if k not in drop}
    theta = config.rope_theta
    out.update({
        "architectures": [ARCHITECTURE], "model_type": "qwen3",
        "hidden_size": config.hidden_size, "vocab_size": config.vocab_size,
        "num_hidden_layers": config.num_layers, "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads, "head_dim": config.head_dim,
        "intermediate_size": config.intermediate_size, "rms_norm_eps": config.rms_eps,
        "hidden_act": "silu", "attention_bias": False, "attention_dropout": 0.0,
        "initializer_range": config.initializer_range,
        "rope_theta": theta, "rope_parameters": {"rope_type": "default", "rope_theta": theta},
        "tie_word_embeddings": False, "dtype": "bfloat16", "torch_dtype": "bfloat16",
        # the engines read the window from these (vLLM's dflash_config, HF's sliding_window): see _engine_window
        **_window_fields(config),
        "sample_from_anchor": True,
        "num_target_layers": num_target_layers, "block_size": config.block_size,
        "mask_token_id": config.mask_token_id, "target_layer_ids": list(config.feature_layers),
        "num_anchors": 512,  # training-only in DeepSpec (anchors per sequence); DeepSpec's default
        "enable_confidence_head": config.confidence_head,
        "markov_rank": config.markov_rank if config.head != "none" else 0,
        WINDOW_KEY: config.window, TARGET_KEY: config.target,
    })
    if config.confidence_head:
        out["confidence_head_with_markov"] = config.confidence_uses_markov
    if config.head != "none":
        out["markov_head_type"] = config.head
    return out


# --------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------


def weight_files(path: Path) -> list[Path]:
    """The safetensors files of a checkpoint directory (one file, or the shards of an index)."""
    index = path / INDEX_FILE
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        files = [path / s for s in shards]
    else:
        files = [path / WEIGHTS_FILE]
    for file in files:
        if not file.is_file():
            raise MinisparkError(f"{path}: weight file {file.name} not found")
    return files


def expected_shapes(config: DraftConfig) -> dict[str, tuple[int, ...]]:
    """DeepSpec name → shape of every weight a drafter with ``config`` has (built on the meta device)."""
    with torch.device("meta"):
        model = DraftModel(config)
    return {to_deepspec_key(k): tuple(v.shape) for k, v in model.state_dict().items()}


def check_weights(path: Path, config: DraftConfig) -> dict[str, tuple[int, ...]]:
    """Compare the checkpoint's weight names and shapes (safetensors headers only) with ``config``;
    a missing, unexpected or mis-shaped key is a one-line error naming it. Returns the found shapes."""
    found: dict[str, tuple[int, ...]] = {}
    for file in weight_files(path):
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():
                found[key] = tuple(handle.get_slice(key).get_shape())
    expected = expected_shapes(config)
    for key, shape in expected.items():
        if key not in found:
            if key in OPTIONAL_KEYS:
                continue
            raise MinisparkError(f"{path}: missing weight {key!r} {list(shape)} (config.json: head {config.head}, "
                                 f"confidence head {config.confidence_head}, {config.num_layers} layers)")
        if found[key] != shape:
            raise MinisparkError(f"{path}: weight {key!r} has shape {list(found[key])}, expected {list(shape)}")
    for key in found:
        if key not in expected:
            raise MinisparkError(f"{path}: unexpected weight {key!r} (not in a {config.head}-head, "
                                 f"confidence={config.confidence_head} drafter)")
    return found


def read_weights(
    path: Path, device: torch.device | str, only: tuple[str, ...] | None = None
) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint directory (all, or the DeepSpec names in ``only``), renamed to
    minispark's state-dict names."""
    weights: dict[str, torch.Tensor] = {}
    for file in weight_files(path):
        with safe_open(str(file), framework="pt", device=str(device)) as handle:
            for key in handle.keys():
                if only is None or key in only:
                    weights[from_deepspec_key(key)] = handle.get_tensor(key)
    return weights


def load_deepspec_model(
    path: str | Path | DrafterDir,
    target_embed: torch.Tensor,
    target_lm_head: torch.Tensor,
    device: torch.device | str,
    *,
    target: str = "deepspec",
    num_target_layers: int | None = None,
    window: int | None = None,
) -> DraftModel:
    """A :class:`DraftModel` from a DeepSpec-layout directory, checked against the target's
    embedding/lm_head (V, d) and, when given, its decoder depth. ``target`` is recorded as the
    drafter's target identity; ``window`` overrides the recorded one (see module docstring)."""
    found = deepspec_dir(path)
    path, raw = found.path, found.raw
    vocab, hidden = target_lm_head.shape
    if target != "deepspec":  # the placeholder when no target identity is known
        check_recorded_target(raw, path, target)
    config = draft_config_from_deepspec(raw, path, hidden_size=hidden, vocab_size=vocab,
                                        num_target_layers=num_target_layers, target=target, window=window)
    check_weights(path, config)
    model = DraftModel.from_target(config, target_embed.to(device), target_lm_head.to(device))
    model.load_state_dict(read_weights(path, device), strict=False)  # names and shapes checked above
    return model.eval()


def check_against_target(path: str | Path | DrafterDir, target: Any, window: int | None = None) -> DraftConfig:
    """Validate a DeepSpec directory against a loaded :class:`~minispark.target.loading.Target` without
    reading the weights (config fields, then weight names/shapes from the safetensors headers)."""
    from minispark.core.identity import target_id

    found = deepspec_dir(path)
    path, raw = found.path, found.raw
    identity = target_id(target.identity())
    check_recorded_target(raw, path, identity)
    config = draft_config_from_deepspec(raw, path, hidden_size=target.hidden_size, vocab_size=target.vocab_size,
                                        num_target_layers=target.num_layers, target=identity, window=window)
    check_weights(path, config)
    return config


def check_recorded_target(raw: dict, path: Path, identity: str) -> None:
    """Refuse a directory minispark exported for another target than ``identity`` (its ``minispark_target``):
    the same check a minispark drafter gets, so neither ``--drafter`` nor ``import`` re-tags it. Official
    DeepSpec checkpoints record no target and are checked by shapes only."""
    from minispark.core.identity import same_target

    recorded = raw.get(TARGET_KEY)
    if recorded and not same_target(str(recorded), identity):
        raise MinisparkError(f"{path}: exported by minispark for target {recorded!r}, not {identity!r} (its "
                             f"config.json {TARGET_KEY}); a drafter proposes well only for the target it was "
                             "trained on: train or export one for this target")
