"""Copy the finished shards of a growing answer set into another directory (e.g. the repo's data folder).

A long ``minispark answers`` run writes into a work directory while it runs; this copies the shards its
manifest lists (each checked against its sha256, written atomically) and then the manifest, so the
destination is always a valid, resumable answer set: ``minispark answers --out DST`` with the same flags
grows it further. Only the unbroken run of shards from the first is copied (a second worker may have
written later shards first): the destination's samples are always the set's first N, in order. Files
already in DST with the listed sha256 are left as they are; nothing is deleted.

    .venv/bin/python scripts/sync_answers.py /work/data/answers-smollm2 data/answers/smollm2-135m-instruct
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from minispark.core.atomic import refuse_symlink, write_bytes_atomic
from minispark.data.answers import MANIFEST, AnswerSet, shard_name
from minispark.data.cache_format import file_sha256


def sync(source: Path, dest: Path) -> int:
    """Copy ``source``'s listed shards and manifest into ``dest``; return how many shards were copied."""
    manifest = json.loads((source / MANIFEST).read_bytes())  # read first: every shard it lists is complete
    AnswerSet(source)  # refuses a corrupt source before anything is copied
    prefix = []
    for k, entry in enumerate(sorted(manifest["shards"], key=lambda e: e["file"])):
        if entry["file"] != shard_name(k):
            break  # a gap: later shards wait until the ones before them are written
        prefix.append(entry)
    manifest |= {"shards": prefix, "complete": manifest["complete"] and len(prefix) == len(manifest["shards"]),
                 "totals": {"samples": sum(e["samples"] for e in prefix),
                            "answer_tokens": sum(e["answer_tokens"] for e in prefix)}}
    manifest_bytes = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    dest = refuse_symlink(dest, "destination")
    if (dest / MANIFEST).is_file() and len(AnswerSet(dest, verify=False)) > manifest["totals"]["samples"]:
        raise SystemExit(f"{dest}: holds more answers than {source}; copying would unlist some of its shards")
    copied = 0
    for entry in prefix:
        target = dest / entry["file"]
        if target.is_file() and not target.is_symlink() and file_sha256(target) == entry["sha256"]:
            continue
        data = (source / entry["file"]).read_bytes()
        write_bytes_atomic(refuse_symlink(target, "shard"), data)
        copied += 1
    write_bytes_atomic(refuse_symlink(dest / MANIFEST, "manifest"), manifest_bytes)
    AnswerSet(dest)  # the copy verifies as a whole
    return copied


if __name__ == "__main__":
    src, dst = map(Path, sys.argv[1:3])
    n = sync(src, dst)
    print(f"{n} shards copied; {dst} holds {len(AnswerSet(dst))} answers")
