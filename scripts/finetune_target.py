"""Fine-tune the embedded target on one domain: the changed target of the warm-start story.

A user fine-tunes their target and finds the drafter they had drafts worse for it. This builds such a target
here, offline: SmolLM2-135M-Instruct, supervised on Python's own standard library (each documented top-level
function of a stdlib module becomes one chat turn: the user asks for the function by its name and its
docstring's first line, the assistant answers with its source; the loss is on the answer), for a few hundred
steps on the CPU. The tied embedding stays frozen (the lm_head with it), the 30 decoder layers and the final
norm train. The weights are not committed: this script rebuilds them (deterministic for one Python version,
whose stdlib is the data; ``finetune.json`` beside the weights records it and the data's hash).

    .venv/bin/python scripts/finetune_target.py runs/changed-target/target --steps 200
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import random
import shutil
import sys
import sysconfig
import time
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from minispark.core.atomic import write_dir_atomic
from minispark.target.embedded import embedded_model_dir

#: Tokenizer and template files copied beside the fine-tuned weights.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")


def stdlib_functions(min_chars: int = 200, max_chars: int = 1200) -> list[tuple[str, str, str]]:
    """(module, name, source) of every documented top-level function of the stdlib's top-level modules whose
    source is ``min_chars``–``max_chars`` long, in file order."""
    found = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and ast.get_docstring(node) and not node.name.startswith("_"):
                source = ast.get_source_segment(text, node) or ""
                if min_chars <= len(source) <= max_chars:
                    found.append((path.stem, node.name, source))
    return found


def encode(tokenizer, module: str, name: str, source: str, doc: str, max_tokens: int) -> tuple[list[int], int]:
    """(ids, prompt length): the chat turn's tokens, cut to ``max_tokens``; the loss starts after the prompt."""
    ask = [{"role": "user", "content": f"Write the Python function `{name}` of the `{module}` module: {doc}"}]
    def ids(messages: list[dict[str, str]], generation_prompt: bool) -> list[int]:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    prompt = ids(ask, True)
    whole = ids(ask + [{"role": "assistant", "content": source}], False)
    if list(whole[:len(prompt)]) != list(prompt):
        raise RuntimeError("the chat template does not extend the prompt with the answer")
    return list(whole[:max_tokens]), len(prompt)


def batches(samples: list[tuple[list[int], int]], batch: int, pad: int, seed: int):
    """Endless seeded epochs of right-padded (input_ids, attention_mask, labels) batches."""
    rng = random.Random(seed)
    while True:
        order = list(range(len(samples)))
        rng.shuffle(order)
        for start in range(0, len(order) - batch + 1, batch):
            rows = [samples[i] for i in order[start:start + batch]]
            width = max(len(ids) for ids, _ in rows)
            ids = torch.full((batch, width), pad)
            labels = torch.full((batch, width), -100)
            mask = torch.zeros((batch, width), dtype=torch.long)
            for r, (row, prompt) in enumerate(rows):
                ids[r, :len(row)] = torch.tensor(row)
                mask[r, :len(row)] = 1
                labels[r, prompt:len(row)] = torch.tensor(row[prompt:])
            yield ids, mask, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="directory for the fine-tuned target (new)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=192, help="tokens of a chat turn at most")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    source_dir = embedded_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(source_dir)
    functions = stdlib_functions()
    samples = [encode(tokenizer, module, name, source, ast.get_docstring(ast.parse(source).body[0]).splitlines()[0],
                      args.max_tokens) for module, name, source in functions]
    digest = hashlib.sha256(json.dumps(samples).encode()).hexdigest()[:16]
    print(f"{len(samples)} stdlib functions (data sha256 {digest}), python {sys.version.split()[0]}", flush=True)
    config = AutoConfig.from_pretrained(source_dir)
    config.__dict__.pop("quantization_config", None)  # the GGUF load's record: the fine-tuned weights are plain
    model = AutoModelForCausalLM.from_pretrained(source_dir, config=config, dtype=torch.float32)
    model.get_input_embeddings().weight.requires_grad_(False)  # tied: the lm_head stays too
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=args.lr, weight_decay=0.0)
    warmup = max(1, args.steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (args.steps - s) / (args.steps - warmup))))
    model.train()
    data = batches(samples, args.batch, tokenizer.pad_token_id or 0, args.seed)
    started, losses = time.perf_counter(), []
    for step in range(1, args.steps + 1):
        ids, mask, labels = next(data)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step % 20 == 0 or step == args.steps:
            recent = sum(losses[-20:]) / len(losses[-20:])
            print(f"step {step}/{args.steps} loss {recent:.3f} ({time.perf_counter() - started:.0f} s)", flush=True)
    model.eval()
    record = {"base": str(source_dir), "python": sys.version.split()[0], "functions": len(samples),
              "data_sha256": digest, "steps": args.steps, "batch": args.batch, "max_tokens": args.max_tokens,
              "lr": args.lr, "seed": args.seed, "first_loss": round(sum(losses[:20]) / len(losses[:20]), 4),
              "last_loss": round(sum(losses[-20:]) / len(losses[-20:]), 4),
              "seconds": round(time.perf_counter() - started, 1)}

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True)
        for name in TOKENIZER_FILES:
            if (source_dir / name).is_file():
                shutil.copy2(source_dir / name, tmp / name)
        (tmp / "finetune.json").write_text(json.dumps(record, indent=1) + "\n")

    write_dir_atomic(args.out, fill)
    print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
