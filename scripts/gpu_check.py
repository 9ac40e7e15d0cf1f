"""The prepared GPU check: one command, no network, that measures what a 6 GB card must hold.

It builds a random-init target — Qwen2.5-VL-3B's shapes with ``--scale 3b`` (36 layers, hidden 2048,
vocab 151,936, its vision tower), loaded 4-bit through bitsandbytes on CUDA; the tiny test VLM with
``--scale tiny`` — and measures:

(a) the ``rtx3050`` recipe's training peak on a synthetic batch of the estimator's worst-case shape
    (``--scale tiny``: the ``tiny`` recipe), and a held-out evaluation's, beside ``train --dry-run``'s
    predictions; (a′) the host RAM of training from a cache (frozen tensors read, drafter built and moved);
(b) the serving peak of one ``generate`` with a ~1-megapixel image and a DSpark drafter of the recipe's
    shape sharing the target's embedding and lm_head (checked: same storage);
(c) a small SPS table (``minispark profile``'s measurement) and one generation's propose / verify time split;
(d) the decoding runtimes side by side: eager vs ``--runtime compiled`` (static KV cache, CUDA graphs) on CUDA —
    the one-time compile, step times at widths 1, 4 and 8, and whether their greedy outputs are identical
    (on a CPU: eager vs packed, which is what ``auto`` runs there);
(e) a draft tree verified in one forward (SDPA with a boolean tree mask on CUDA): every node's logits against a
    plain forward of its root-to-node path (largest difference, argmax agreement), and the step time of a
    16-node tree beside a one-token step (on a GPU the tree's width should cost about one step).

It writes ``gpu_check.json`` and ``gpu_check.txt`` (a short table) under ``--out`` and exits 1 when a CUDA
peak exceeds 5.5 GB. On a CPU it runs the same steps at tiny scale (``tests/test_gpu_check.py`` runs it in the
suite, so it cannot rot); peaks there are RSS growth, reported but not held to the limit.

    .venv/bin/python scripts/gpu_check.py --scale 3b --out runs/gpu-check      # on the 6 GB card: ≤ 8 minutes
    .venv/bin/python scripts/gpu_check.py --scale tiny --device cpu --out /tmp/gpu-check
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

# the tiny test models live with the tests (tests/tiny_models.py), read from the checkout this script is in
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LIMIT_GB = 5.5
GB = 1e9


def qwen25_vl_3b_config(tokenizer: Any):
    """Qwen2.5-VL-3B-Instruct's shapes (its config.json), with this tokenizer's special-token ids."""
    from transformers import Qwen2_5_VLConfig

    text = {"vocab_size": 151_936, "hidden_size": 2048, "intermediate_size": 11_008, "num_hidden_layers": 36,
            "num_attention_heads": 16, "num_key_value_heads": 2, "max_position_embeddings": 128_000,
            "rms_norm_eps": 1e-6, "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]}}
    vision = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "out_hidden_size": 2048,
              "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
              "fullatt_block_indexes": [7, 15, 23, 31]}
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **ids)


def build_target_dir(scale: str, out: Path) -> Path:
    """A random-init target directory (safetensors, tokenizer, processor) of ``scale``."""
    from tests.tiny_models import build_tiny, tiny_processor, tiny_tokenizer

    if scale == "tiny":
        return build_tiny("qwen2_5_vl", out)
    from transformers import AutoModelForImageTextToText

    tokenizer = tiny_tokenizer("qwen2_5_vl")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForImageTextToText.from_config(qwen25_vl_3b_config(tokenizer), dtype=torch.bfloat16)
    model.save_pretrained(out)
    del model
    gc.collect()
    processor = tiny_processor("qwen2_5_vl", tokenizer)
    processor.image_processor.size = {"shortest_edge": 56 * 56, "longest_edge": 1280 * 28 * 28}
    processor.save_pretrained(out)
    return out


class Peak:
    """Peak device bytes (CUDA: max allocated since start) or host RSS growth (CPU) of a block."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.bytes = device, 0

    def __enter__(self) -> "Peak":
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            self.start = torch.cuda.memory_allocated(self.device)
        else:
            self.start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.bytes = torch.cuda.max_memory_allocated(self.device)  # everything resident counts
        else:
            self.bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - self.start


def training_peak(scale: str, device: torch.device) -> dict[str, float]:
    """(a): three training steps of the recipe on a synthetic worst-case batch, and the prediction."""
    from minispark.training.memory import BatchShape, estimate_memory, heldout_shape
    from minispark.measuring.memory_measure import build_synthetic, synthetic_heldout
    from minispark.training.recipes import load_recipe
    from minispark.training.trainer import autocast, train_step

    overrides = [f"device={device.type}"] + ([] if device.type == "cuda" else ["dtype=fp32", "optimizer=adamw"])
    config = load_recipe("rtx3050" if scale == "3b" else "tiny", overrides + ["compile=false"])
    shape = BatchShape.from_config(config)
    config = replace(config, heldout_cache="synthetic")  # the estimate then has its held-out phase
    with Peak(device) as peak:
        model, optimizer, scheduler, batch = build_synthetic(config, shape)
        for step in range(3):
            generator = torch.Generator(device.type).manual_seed(step)
            train_step(model, optimizer, scheduler, batch, config, generator)
    with Peak(device) as heldout:  # the evaluation the trainer runs every eval_every steps
        synthetic_heldout(config, model, heldout_shape(config)).score(model, autocast(config))
    del model, optimizer, scheduler, batch
    estimate = estimate_memory(config, shape)
    return {"measured_gb": peak.bytes / GB, "predicted_gb": estimate.predicted_peak / GB,
            "heldout_gb": heldout.bytes / GB, "heldout_predicted_gb": estimate.phases["held-out proxy"] / GB}


def _proc_kib(key: str) -> int:
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith(key + ":"))


def training_host_peak(target_dir: Path, scale: str, device: torch.device) -> dict[str, float]:
    """(a′) host RAM of training from a cache: the target's frozen tensors read from its safetensors, the
    drafter built on the host and moved to ``device`` (Linux: RSS peak since a reset of the kernel's
    counter, and its growth over the RSS before, which holds the loaded libraries)."""
    from minispark.training.memory import estimate_memory
    from minispark.training.draft_sizes import draft_config, target_dims
    from minispark.training.recipes import load_recipe
    from minispark.training.target_tensors import load_frozen_parts
    from minispark.training.trainer import build_model

    overrides = [f"device={device.type}", "compile=false"] + ([] if device.type == "cuda" else ["dtype=fp32"])
    config = load_recipe("rtx3050" if scale == "3b" else "tiny", overrides)
    gc.collect()
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # VmHWM := the current RSS
    before = _proc_kib("VmRSS")
    target = load_frozen_parts(str(target_dir))
    draft = draft_config(config, target_dims(target), mask_token_id=0,
                         dtype="bfloat16" if config.compute_dtype == "bf16" else "float32")
    model = build_model(draft, target.model.get_input_embeddings().weight.detach(), target.lm_head.weight.detach(),
                        config)
    peak = _proc_kib("VmHWM")
    del model, target
    predicted = estimate_memory(config, draft=draft).host_peak
    return {"rss_peak_gb": peak / GB, "growth_gb": (peak - before) / GB, "rss_before_gb": before / GB,
            "predicted_gb": None if predicted is None else predicted / GB}


def serving_peak(target_dir: Path, scale: str, device: torch.device, work: Path, sps_dir: Path) -> dict[str, Any]:
    """(b) and (c): load the target (4-bit on CUDA), serve one image turn with a drafter, profile a small table."""
    from minispark.measuring.profiler import ProfileConfig, run_profile
    from minispark.model.checkpoint import save_drafter
    from minispark.model.draft_model import DraftModel
    from minispark.serving.generate import generate, make_drafter
    from minispark.target.loading import load_target
    from minispark.core.identity import target_id
    from tests.tiny_models import make_test_image
    from minispark.training.draft_sizes import draft_config, target_dims
    from minispark.training.recipes import load_recipe

    quantized = device.type == "cuda"
    with Peak(device) as loading:
        target = load_target(str(target_dir), device=str(device), load_in_4bit=quantized)
    recipe = load_recipe("rtx3050" if scale == "3b" else "tiny")
    dims = target_dims(target)
    draft = draft_config(recipe, dims, feature_layers=target.auto_layers(), mask_token_id=dims.vocab_size - 1,
                         target=target_id(target.identity()),
                         dtype="bfloat16" if target.dtype == torch.bfloat16 else "float32")
    draft = replace(draft, draft_vocab=0)  # the whole vocabulary: what shares the target's lm_head
    embed, head = target.model.get_input_embeddings().weight, target.lm_head.weight
    save_drafter(DraftModel.from_target(draft, embed.detach(), head.detach()), work / "drafter")
    image = make_test_image(work / "photo.png", size=(1155, 866))  # ~1.0 MP, inside the default budget
    with Peak(device) as serving:
        drafter = make_drafter(str(work / "drafter"), target, "float")
        out = generate(target, "Describe the picture.", images=[image], drafter=drafter, max_new_tokens=16, seed=0)
    shared = (drafter.model.embed_tokens.weight.untyped_storage().data_ptr() == embed.untyped_storage().data_ptr()
              and drafter.model.lm_head.weight.untyped_storage().data_ptr() == head.untyped_storage().data_ptr())
    stats = out.result.stats
    table, path = run_profile(ProfileConfig(contexts=[64, 256], max_tokens=8, rounds=2, warmup=1, cooldown_s=0.0,
                                            allow_busy=True, note="gpu_check"),
                              target=str(target_dir), device=str(device), load_in_4bit=quantized,
                              out_dir=sps_dir, show_progress=False)
    return {"load_gb": loading.bytes / GB, "serving_gb": serving.bytes / GB, "quantized": quantized,
            "drafter_shares_embedding_and_lm_head": shared, "new_tokens": stats.new_tokens, "rounds": stats.rounds,
            "propose_s": stats.propose_s, "verify_s": stats.verify_s, "wall_s": stats.wall_s,
            "sps_table": str(path)}


def runtime_steps(target_dir: Path, device: torch.device) -> dict[str, Any]:
    """(d): per runtime, the warm-up (compile) time, median step times at widths 1/4/8, greedy tokens."""
    import statistics

    from minispark.serving.generate import generate
    from minispark.target.loading import load_target

    quantized = device.type == "cuda"
    report: dict[str, Any] = {}
    for runtime in ("eager", "compiled" if device.type == "cuda" else "packed"):
        target = load_target(str(target_dir), device=str(device), load_in_4bit=quantized, runtime=runtime)
        warm = target.warm_up(range(1, 9))
        prompt = target.encode(prompt="Count from one to twenty, then say why you stopped. " * 8)
        times: dict[int, list[float]] = {1: [], 4: [], 8: []}
        with target.session() as session:
            session.prefill(prompt)
            for _ in range(5):
                for width in times:
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                    start = time.perf_counter()
                    session.step(prompt.input_ids[0, :width])
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                    times[width].append(time.perf_counter() - start)
                    session.crop(prompt.length)
        tokens = generate(target, "Describe a lighthouse at night.", drafter="none", max_new_tokens=32,
                          seed=0).result.token_ids
        report[runtime] = {"warm_up_s": warm, "tokens": tokens,
                           "step_ms": {w: statistics.median(t) * 1e3 for w, t in times.items()}}
        del target
        gc.collect()
    first, second = report.values()
    report["identical_greedy"] = first["tokens"] == second["tokens"]
    return report


def tree_verify(target_dir: Path, device: torch.device) -> dict[str, Any]:
    """(e): a branching tree's logits against per-path forwards, and a 16-node tree's step time."""
    import statistics

    from minispark.target.loading import load_target

    target = load_target(str(target_dir), device=str(device), load_in_4bit=device.type == "cuda", runtime="eager")
    prompt = target.encode(prompt="Name three rivers and the seas they reach. " * 4)
    parents = [-1, 0, 0, 1, 1, 2, 3, 5]
    tokens = prompt.input_ids[0, 1: 1 + len(parents)].to(target.device)  # any real token ids
    worst, agree = 0.0, 0
    with target.session() as session:
        session.prefill(prompt)
        start = session.cache_length
        tree = session.step_tree(tokens, torch.tensor(parents)).logits  # (n, V)
        session.crop(start)
        for node in range(len(parents)):
            path, i = [], node
            while i >= 0:
                path.append(i)
                i = parents[i]
            alone = session.step(tokens[path[::-1]]).logits[-1]  # (V,)
            session.crop(start)
            worst = max(worst, float((alone - tree[node]).abs().max()))
            agree += int(alone.argmax() == tree[node].argmax())
        wide = [-1] + list(range(15))  # 16 nodes, a chain's shape through the tree mask
        times: dict[str, list[float]] = {"one token": [], "16-node tree": []}
        for _ in range(5):
            for name in times:
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                begin = time.perf_counter()
                if name == "one token":
                    session.step(tokens[:1])
                else:
                    session.step_tree(prompt.input_ids[0, :16].to(target.device), torch.tensor(wide))
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                times[name].append(time.perf_counter() - begin)
                session.crop(start)
    return {"nodes": len(parents), "max_abs_logit_diff": worst, "argmax_agree": agree,
            "step_ms": {name: statistics.median(t) * 1e3 for name, t in times.items()}}


def over_limit(report: dict[str, Any], limit_gb: float = LIMIT_GB) -> list[str]:
    """The CUDA peaks above ``limit_gb`` (none on a CPU, whose RSS figures are not the card's)."""
    if report["device"] != "cuda":
        return []
    peaks = {"training": report["training"]["measured_gb"], "serving": report["serving"]["serving_gb"]}
    return [f"{name} peak {value:.2f} GB > {limit_gb} GB" for name, value in peaks.items() if value > limit_gb]


def render(report: dict[str, Any]) -> str:
    t, s = report["training"], report["serving"]
    h = report["training_host"]
    host_predicted = "" if h["predicted_gb"] is None else f" (predicted {h['predicted_gb']:.3f})"
    rows = [("training peak (measured / predicted)", f"{t['measured_gb']:.3f} / {t['predicted_gb']:.3f} GB"),
            ("held-out evaluation (measured / pred.)", f"{t['heldout_gb']:.3f} / {t['heldout_predicted_gb']:.3f} GB"),
            ("training host RAM (peak / growth)", f"{h['rss_peak_gb']:.3f} / {h['growth_gb']:.3f} GB{host_predicted}"),
            ("target load", f"{s['load_gb']:.3f} GB{' (4-bit)' if s['quantized'] else ''}"),
            ("serving peak, 1 MP image + drafter", f"{s['serving_gb']:.3f} GB"),
            ("drafter shares embedding + lm_head", str(s["drafter_shares_embedding_and_lm_head"])),
            ("propose / verify / wall", f"{s['propose_s']:.2f} / {s['verify_s']:.2f} / {s['wall_s']:.2f} s "
                                        f"({s['new_tokens']} tokens, {s['rounds']} rounds)")]
    runtimes = report.get("runtimes", {})
    for name, row in runtimes.items():
        if isinstance(row, dict):
            steps = " / ".join(f"{ms:.1f}" for ms in row["step_ms"].values())
            compiled = f", compiled in {row['warm_up_s']:.0f} s" if row["warm_up_s"] is not None else ""
            rows.append((f"runtime {name}: step ms at 1 / 4 / 8", steps + compiled))
    if runtimes:
        rows.append(("runtimes decode identically (greedy)", str(runtimes["identical_greedy"])))
    if (tree := report.get("tree")) is not None:
        rows.append(("tree verify vs per-path forwards", f"max |Δlogit| {tree['max_abs_logit_diff']:.2e}, argmax "
                                                         f"{tree['argmax_agree']}/{tree['nodes']}"))
        rows.append(("step ms: one token / 16-node tree", " / ".join(f"{ms:.1f}" for ms in tree["step_ms"].values())))
    head = f"gpu_check {report['scale']} on {report['device_name']} ({report['date']}, torch {report['torch']})"
    return "\n".join([head] + [f"  {k:<38} {v}" for k, v in rows] + [f"  {'over the limit':<38} "
                                                                      f"{', '.join(report['over_limit']) or 'none'}"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=("tiny", "3b"), default="3b")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=Path("runs/gpu-check"))
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = Path(tmp)
        target_dir = build_target_dir(args.scale, work / "target")
        report: dict[str, Any] = {
            "scale": args.scale, "device": device.type, "date": time.strftime("%Y-%m-%d"),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__, "training": training_peak(args.scale, device),
            "training_host": training_host_peak(target_dir, args.scale, device),
            "serving": serving_peak(target_dir, args.scale, device, work, args.out / "sps"),
            "runtimes": runtime_steps(target_dir, device), "tree": tree_verify(target_dir, device)}
    report["seconds"] = time.perf_counter() - started
    report["over_limit"] = over_limit(report)
    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "gpu_check.txt").write_text(render(report) + "\n")
    print(render(report))
    if report["over_limit"]:
        print(f"FAILED: {'; '.join(report['over_limit'])}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
