"""SPS tables: JSON round trip, schema errors, interpolation, lookup by device and target."""

import json
import warnings
from dataclasses import asdict
from pathlib import Path

import pytest

from minispark.serving.sps import (
    SPSTable,
    SPSTableError,
    find_table,
    list_tables,
    sanitize_name,
    table_filename,
    table_runtime,
)
from tests.helpers import REPO

REPO_TABLES = REPO / "sps_tables"


def make_table(
    device="NVIDIA GeForce RTX 3050", target="Qwen/Qwen3-VL-2B-Instruct", dtype="bfloat16"
):
    seconds = [[0.010, 0.011, 0.014], [0.020, 0.021, 0.024]]
    return SPSTable(
        device=device,
        target=target,
        dtype=dtype,
        quantization="none",
        contexts=[0, 1000],
        tokens=[1, 2, 4],
        seconds=seconds,
        seconds_min=[[s * 0.95 for s in row] for row in seconds],
        seconds_spread=[[0.02, 0.03, 0.02], [0.01, 0.01, 0.05]],
        metadata={"torch": "2.14.1", "driver": "555.42", "date": "2025-01-01T00:00:00Z"},
    )


#: A batched grid for make_table: 2 and 4 requests × widths 1..2 at context 0.
GRID = {"context": 0, "requests": [2, 4], "widths": [1, 2], "seconds": [[0.016, 0.018], [0.030, 0.034]]}


def test_batched_grid_round_trip_and_lookup(tmp_path):
    table = make_table()
    table.batched = GRID
    assert SPSTable.load(table.save(tmp_path / "t.json")) == table
    assert table.batched_seconds(1, 2) == pytest.approx(0.011)  # one request: the table's own row
    assert table.batched_seconds(3, 1) == pytest.approx(0.023)  # between 2 and 4 requests
    assert table.batched_seconds(6, 2) == pytest.approx(0.034 + 2 * 0.008)  # past 4: linear in the last two
    with pytest.raises(SPSTableError, match="outside the profiled widths 1..2"):
        table.batched_seconds(2, 3)
    # A table from before the grid existed loads, and prices R·W tokens of one sequence.
    data = asdict(make_table())
    del data["batched"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = SPSTable.load(tmp_path / "old.json")
    assert old.batched is None and old.batched_seconds(2, 2) == pytest.approx(old.step_seconds(4))


def test_round_trip_and_atomic_save(tmp_path):
    table = make_table()
    path = table.save(table.path_in(tmp_path))
    assert path.name == "nvidia-geforce-rtx-3050__qwen-qwen3-vl-2b-instruct.json"
    assert SPSTable.load(path) == table
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left behind


def test_interpolation_between_contexts_and_tokens():
    table = make_table()
    assert table.step_seconds(1, 0) == pytest.approx(0.010)
    assert table.step_seconds(1, 500) == pytest.approx(0.015)
    assert table.step_seconds(4, 250) == pytest.approx(0.014 + 0.25 * 0.010)
    assert table.step_seconds(1, 5000) == pytest.approx(0.020)  # clamped above the profiled range
    assert table.step_seconds(3, 0) == pytest.approx(0.0125)  # between profiled token counts
    assert table.sps(1, 500) == pytest.approx(1 / 0.015)
    assert table.curve(3, 0) == pytest.approx([100.0, 1 / 0.011, 80.0])


def test_tokens_beyond_profile_are_refused():
    with pytest.raises(SPSTableError, match=r"5 tokens is outside the profiled range 1\.\.4"):
        make_table().sps(5, 0)


def test_from_inline():
    table = SPSTable.from_inline([1.0, 0.5, 0.45])
    assert table.curve(3) == pytest.approx([1.0, 0.5, 0.45])
    assert table.sps(2, context_length=10_000) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        SPSTable.from_inline([1.0, 0.0])


def test_generic_is_decreasing():
    curve = SPSTable.generic().curve(16)
    assert all(b < a for a, b in zip(curve, curve[1:]))


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda d: d.pop("seconds"), "seconds"),
        (lambda d: d.update(colour="red"), "colour"),
        (lambda d: d.update(version=7), "version"),
        (lambda d: d.update(device=""), "device"),
        (lambda d: d.update(contexts=[1000, 0]), "contexts"),
        (lambda d: d.update(tokens=[0, 1, 2]), "tokens"),
        (lambda d: d["seconds"].pop(), "seconds"),
        (lambda d: d["seconds_spread"][1].pop(), "seconds_spread"),
        (lambda d: d["seconds"][0].__setitem__(1, -1.0), "seconds"),
        (lambda d: d["seconds_min"][0].__setitem__(0, 1.0), "seconds_min"),
        (lambda d: d["metadata"].pop("driver"), "metadata.driver"),
        (lambda d: d.update(batched={"context": 0}), "batched"),
        (lambda d: d.update(batched=dict(GRID, context=500)), "batched.context"),  # not one of the contexts
        (lambda d: d.update(batched=dict(GRID, requests=[1, 4])), "batched.requests"),
        (lambda d: d.update(batched=dict(GRID, widths=[1, 3])), "batched.widths"),
        (lambda d: d.update(batched=dict(GRID, widths=[1, 2, 3, 4, 5], seconds=[[1.0] * 5] * 2)), "batched.widths"),
        (lambda d: d.update(batched=dict(GRID, seconds=[[0.02, 0.0], [0.03, 0.04]])), "batched.seconds"),
        (lambda d: d.update(batched=dict(GRID, seconds=[[0.02, 0.03]])), "batched.seconds"),
    ],
)
def test_schema_errors_name_file_and_field(tmp_path, edit, field):
    data = asdict(make_table())
    edit(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SPSTableError) as info:
        SPSTable.load(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message and f"'{field}'" in message


def test_unreadable_files(tmp_path):
    with pytest.raises(SPSTableError, match="not found"):
        SPSTable.load(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(SPSTableError, match="broken.json: not readable as JSON"):
        SPSTable.load(tmp_path / "broken.json")


def test_sanitize_name():
    assert (
        sanitize_name("NVIDIA GeForce RTX 3050 Laptop GPU") == "nvidia-geforce-rtx-3050-laptop-gpu"
    )
    assert sanitize_name("Qwen/Qwen3-VL-2B-Instruct") == "qwen-qwen3-vl-2b-instruct"
    assert sanitize_name("a__b") == "a-b"  # '__' stays reserved as the device/target separator
    assert sanitize_name("../..") == "unknown"
    assert table_filename("cpu", "SmolLM2-135M") == "cpu__smollm2-135m.json"


def test_find_table_exact_and_by_device_substring(tmp_path):
    exact = make_table()
    exact.save(exact.path_in(tmp_path))
    assert find_table(tmp_path, exact.device, exact.target) == exact
    short = make_table(device="RTX 4090")
    short.save(tmp_path / "nested" / "mine.json")  # found recursively, whatever the file name
    found = find_table(tmp_path, "NVIDIA GeForce RTX 4090 D", "qwen/qwen3-vl-2b-instruct")
    assert found == short
    with pytest.warns(UserWarning, match="no SPS table"):  # only whole '-'-separated words match
        find_table(tmp_path, "NVIDIA GeForce RTX 40900", "qwen/qwen3-vl-2b-instruct")


def test_find_table_fallback_and_strict(tmp_path):
    table = make_table()
    table.save(table.path_in(tmp_path))
    with pytest.warns(
        UserWarning,
        match="no SPS table for device 'NVIDIA GeForce RTX 3050' and target 'other/model'",
    ):
        fallback = find_table(tmp_path, table.device, "other/model")
    assert fallback.device == "generic"
    with pytest.raises(SPSTableError, match=r"expected nvidia-geforce-rtx-3050__other-model\.json"):
        find_table(tmp_path, table.device, "other/model", strict=True)
    with pytest.warns(UserWarning, match="dtype=float16"):  # another precision is another workload
        assert find_table(tmp_path, table.device, table.target, dtype="float16").device == "generic"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert find_table(tmp_path, table.device, table.target, dtype="bfloat16") == table
    with pytest.warns(UserWarning, match="found: none"):
        find_table(tmp_path / "absent", "cpu", "x")


def test_find_table_never_skips_a_malformed_table_unasked(tmp_path):
    (tmp_path / "junk.json").write_text("[]")
    with pytest.raises(SPSTableError, match="junk.json"):
        find_table(tmp_path, "cpu", "x")


def test_a_bad_table_file_is_skipped_and_named_when_asked(tmp_path):
    """One note saved as .json in the user's table directory (or a damaged own table) hid every table, the
    shipped one too, and schedule mode fell back to the generic curve without a word."""
    user, shipped = tmp_path / "user", tmp_path / "shipped"
    (user / "notes.json").parent.mkdir()
    (user / "notes.json").write_text('{"my": "notes"}')
    table = make_table()
    (user / table.path_in(user).name).write_text("{ damaged")  # the exact file name, corrupt
    table.save(table.path_in(shipped))
    skipped: list[str] = []
    assert find_table([user, shipped], table.device, table.target, strict=True, skipped=skipped) == table
    assert len(skipped) == 2 and any("notes.json: not an SPS table" in s for s in skipped)
    assert any(table.path_in(user).name in s and "not readable as JSON" in s for s in skipped)


@pytest.mark.parametrize("path", list_tables(REPO_TABLES), ids=lambda p: p.name)
def test_every_shipped_table_loads(path):
    table = SPSTable.load(path)
    assert path.name == table.path_in(REPO_TABLES).name
    assert path.name.startswith(table_filename(table.device, table.target).removesuffix(".json"))


def test_monotone_envelope():
    from minispark.serving.sps import monotone_envelope

    # the shipped 2-thread CPU curve's shape: 2 and 3 tokens slower than 4 and 5
    curve = [1 / 64.8, 1 / 110.9, 1 / 136.0, 1 / 105.1, 1 / 94.4, 1 / 110.0]
    envelope, source = monotone_envelope(curve)
    assert source == [0, 4, 4, 4, 4, 5]
    assert envelope == [curve[0], curve[4], curve[4], curve[4], curve[4], curve[5]]
    assert all(a >= b for a, b in zip(envelope, envelope[1:]))
    assert monotone_envelope([1.0, 0.5, 0.5]) == ([1.0, 0.5, 0.5], [0, 1, 2])  # ties: no padding


def test_save_replaces_only_a_table(tmp_path: Path) -> None:
    """profile --out DIR replaced a user's file of the table's name: only an earlier
    table is replaced; someone's file, or a symlink planted there, is refused and left as it was."""
    from minispark.serving.sps import SPSTableError

    table = SPSTable.from_inline([1.0, 0.5])
    path = table.save(tmp_path / "t.json")
    assert table.save(path) == path  # an earlier profile's table: replaced
    notes = tmp_path / "notes.json"
    notes.write_text("my notes\n")
    with pytest.raises(SPSTableError, match="exists and is not an SPS table minispark wrote"):
        table.save(notes)
    assert notes.read_text() == "my notes\n"
    (tmp_path / "link.json").symlink_to(path)
    with pytest.raises(SPSTableError, match="is not an SPS table minispark wrote"):
        table.save(tmp_path / "link.json")


def test_a_table_of_another_dtype_is_filed_beside_the_first_not_over_it(tmp_path: Path) -> None:
    """`profile --dtype bf16` wrote over the fp32 table of the same device and target, without a word; every fp32
    run then found no table. Each is kept, and each run finds its own."""
    from dataclasses import replace

    def table(dtype: str, runtime: str = "packed") -> SPSTable:
        inline = SPSTable.from_inline([1.0, 0.5], device="AMD EPYC, 2 threads", target="tiny")
        return replace(inline, dtype=dtype, metadata={**inline.metadata, "runtime": runtime})

    fp32 = table("float32").save(table("float32").path_in(tmp_path))
    bf16 = table("bfloat16").save(table("bfloat16").path_in(tmp_path))
    int8 = table("float32", "int8").save(table("float32", "int8").path_in(tmp_path))
    assert len({fp32, bf16, int8}) == 3 and fp32.name == "amd-epyc-2-threads__tiny.json"
    assert table("bfloat16").path_in(tmp_path) == bf16 and table("float32").path_in(tmp_path) == fp32  # re-profiled
    for dtype, runtime in (("float32", "packed"), ("bfloat16", "packed"), ("float32", "int8")):
        found = find_table([tmp_path], "AMD EPYC, 2 threads", "tiny", dtype=dtype, runtime=runtime, strict=True)
        assert (found.dtype, table_runtime(found)) == (dtype, runtime)
