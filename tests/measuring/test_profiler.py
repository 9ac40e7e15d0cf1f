"""SPS profiler: table shape and metadata, steady cache length, chunked prefill, drift re-measurement.

(Every shipped table under sps_tables/ is loaded by tests/serving/test_sps.py::test_every_shipped_table_loads.)
"""

import math
import re
import warnings

import pytest
import torch

from minispark.core import identity
from minispark.measuring import profile_rounds, system_load
from minispark.core.errors import MinisparkError
from minispark.measuring.profiler import ProfileConfig, format_table, plot_sps, profile_target
from minispark.serving.sps import SPSTable, find_table, table_filename
from minispark.target.loading import load_target
from minispark.target.session import PromptInputs, TargetSession


@pytest.fixture(autouse=True)
def idle_machine(monkeypatch):
    """Other processes share the test machine: every test reads a simulated load (idle unless the
    test patches ``system_load.read_load`` itself), so no test depends on, or refuses for, real load."""
    monkeypatch.setattr(system_load, "read_load", lambda: (0.0, 2))
    monkeypatch.setattr(system_load, "read_cpu_times", lambda: None)  # the load-average path, unless patched


@pytest.fixture(scope="module")
def tiny_target(tiny_dir):
    return load_target(str(tiny_dir("llama")))


class ThrottlingClock:
    """A fake device: every step takes 1 ms, or 2 ms while hot; a cooldown sleep ends the heat.

    The profiler reads the timer exactly twice per timed step, so every second read ends a step.
    Steps ``hot_from .. hot_from + hot_steps - 1`` (1-based) run hot unless a sleep came first.
    """

    def __init__(self, hot_from: int, hot_steps: int) -> None:
        self.now = 0.0
        self.reads = 0
        self.steps = 0
        self.hot_from, self.hot_until = hot_from, hot_from + hot_steps
        self.sleeps: list[float] = []

    def timer(self) -> float:
        self.reads += 1
        if self.reads % 2 == 0:
            self.steps += 1
            hot = self.hot_from <= self.steps < self.hot_until
            self.now += 0.002 if hot else 0.001
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.hot_until = min(self.hot_until, self.steps + 1)  # cooled: no more hot steps


def test_table_shape_metadata_and_round_trip(tiny_target, tmp_path, monkeypatch):
    cache_lengths = []
    real_step = TargetSession.step

    def spy(session, tokens):
        cache_lengths.append((session.cache_length, tokens.numel()))
        return real_step(session, tokens)

    monkeypatch.setattr(TargetSession, "step", spy)
    config = ProfileConfig(contexts=[40, 16, 5000], max_tokens=3, rounds=2, warmup=1,
                           reference_repeats=2, drift_bound=10.0, note="unit test", cooldown_s=0.0)
    calls = []
    with pytest.warns(UserWarning, match=r"skipping contexts \[5000\]"):
        table = profile_target(tiny_target, config, progress=lambda *a: calls.append(a))

    assert table.contexts == [16, 40] and table.tokens == [1, 2, 3]
    for grid in (table.seconds, table.seconds_min, table.seconds_spread):
        assert [len(row) for row in grid] == [3, 3]
    assert all(lo <= med for lo_row, row in zip(table.seconds_min, table.seconds)
               for lo, med in zip(lo_row, row))
    assert table.device.endswith(f", {torch.get_num_threads()} thread" + ("s" if torch.get_num_threads() > 1 else ""))
    assert (table.dtype, table.quantization) == ("float32", "none")
    meta = table.metadata
    assert meta["torch"] == torch.__version__ and meta["driver"] == "n/a" and meta["note"] == "unit test"
    assert meta["contexts_skipped"] == [5000] and set(meta["drift"]) == {"16", "40"}
    assert meta["config"]["max_tokens"] == 3

    # Every step starts from the profiled context: crop() restores the cache after each one.
    assert {length for length, _ in cache_lengths} == {16, 40}
    assert {n for _, n in cache_lengths} == {1, 2, 3}
    assert calls[-1][0] == calls[-1][1] == 2 * 2 * 3  # contexts × rounds × sizes, all done

    path = table.save(table.path_in(tmp_path))
    assert path.name == table_filename(table.device, table.target)
    assert SPSTable.load(path) == table
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # found, not the generic fallback
        assert find_table(tmp_path, table.device, table.target, dtype="float32") == table

    assert "n=3" in format_table(table)
    png = plot_sps(table, tmp_path / "sps.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_chunked_prefill_matches_one_prefill(tiny_target, monkeypatch):
    ids = torch.randint(0, tiny_target.vocab_size, (1, 21), generator=torch.Generator().manual_seed(0))
    with tiny_target.session() as whole:
        whole.prefill(PromptInputs(input_ids=ids[:, :20], text_positions=torch.arange(20)))
        expected = whole.step(ids[0, 20:]).logits
    monkeypatch.setattr(profile_rounds, "PREFILL_CHUNK", 8)
    with tiny_target.session() as chunked:
        profile_rounds.build_cache(chunked, ids[:, :20])
        assert chunked.cache_length == 20
        # batched vs chunked attention differ by float rounding only (logits have std ~6)
        torch.testing.assert_close(chunked.step(ids[0, 20:]).logits, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("max_remeasure", [2, 0], ids=["remeasured", "negative-control"])
def test_drift_triggers_cooldown_and_remeasure(tiny_target, max_remeasure):
    # Per context: 4 warm-up steps, 3 baseline steps, then rounds of 6 steps (ref, 4 sizes, ref).
    # From step 16 on (the last three sizes and closing reference of round 2) the device runs hot
    # until a cooldown.
    clock = ThrottlingClock(hot_from=16, hot_steps=1000)
    config = ProfileConfig(contexts=[8], max_tokens=4, rounds=3, warmup=1, reference_repeats=3,
                           drift_bound=0.1, max_remeasure=max_remeasure, cooldown_s=7.0)
    table = profile_target(tiny_target, config, timer=clock.timer, sleep=clock.sleep)
    drift = table.metadata["drift"]["8"]
    assert drift["baselines_s"][0] == pytest.approx(0.001)
    if max_remeasure:
        # The drifted round was thrown away and measured again after one cooldown: clean table.
        assert clock.sleeps == [7.0]
        assert drift["max_abs_drift"] == pytest.approx(0.5)
        assert (drift["remeasured_rounds"], drift["kept_drifted_rounds"]) == (1, 0)
        assert len(drift["baselines_s"]) == 1
        assert all(s == pytest.approx(0.001) for row in table.seconds_min + table.seconds for s in row)
        assert all(math.isclose(s, 0.0, abs_tol=1e-6) for s in table.seconds_spread[0])
    else:
        # Without re-measurement the device never cools and the hot timings land in the table.
        assert clock.sleeps == []
        assert drift["max_abs_drift"] == pytest.approx(0.5)
        assert (drift["remeasured_rounds"], drift["kept_drifted_rounds"]) == (0, 1)
        # The kept drifted round re-took the baseline at the hot level, so round 3 is not "drifted".
        assert drift["baselines_s"] == pytest.approx([0.001, 0.002])
        assert sum(s == pytest.approx(0.002) for s in table.seconds[0]) == 3


class LoadReadings:
    """Simulated 1-minute load averages, one per read (the profiler reads before and after)."""

    def __init__(self, *loads: float, cores: int = 2) -> None:
        self.loads, self.cores = list(loads), cores

    def __call__(self) -> tuple[float, int]:
        return self.loads.pop(0), self.cores


#: A profile of the tiny model in a test: its millisecond steps jitter past the drift bound, and the default cooldown
#: would sleep seconds per re-measured round (the cooldown itself is tested on a fake clock).
SMALL = dict(contexts=[8], max_tokens=2, rounds=1, warmup=0, reference_repeats=1, cooldown_s=0.0)


def test_busy_machine_is_refused_before_profiling(tiny_target, monkeypatch):
    torch.set_num_threads(1)
    monkeypatch.setattr(system_load, "read_load", LoadReadings(2.0))  # 1 free core + 0.5 slack < 2.0
    steps = []
    monkeypatch.setattr(TargetSession, "step", lambda *a: steps.append(a))
    with pytest.raises(MinisparkError, match=r"busy before profiling .*2.00 of it from other.*allow_busy"):
        profile_target(tiny_target, ProfileConfig(**SMALL))
    assert steps == []  # refused before a single timed step


def test_busy_during_profiling_is_refused_and_own_load_is_discounted(tiny_target, monkeypatch):
    torch.set_num_threads(1)
    monkeypatch.setattr(system_load, "read_load", LoadReadings(0.2, 2.5))
    with pytest.raises(MinisparkError, match="busy during profiling"):
        profile_target(tiny_target, ProfileConfig(**SMALL))
    # After 120 s of profiling with 1 thread the profiler itself accounts for ~0.86 of the load.
    load = system_load.MachineLoad(load_1min=2.3, cores=2, threads=1, own=0.0)
    assert load.busy
    assert not system_load.MachineLoad(2.3, 2, 1, own=1 - math.exp(-2)).busy


class CpuReadings:
    """Fake ``read_cpu_times``: (busy CPU-s of all cores, this process's CPU-s, seconds) per call."""

    def __init__(self, *readings: tuple[float, float, float]) -> None:
        self.readings = list(readings)

    def __call__(self) -> tuple[float, float, float]:
        return self.readings.pop(0)


def test_cpu_time_accounting_discounts_this_process_and_sees_others(monkeypatch):
    torch.set_num_threads(2)
    monkeypatch.setattr(system_load, "CPU_WINDOW_S", 0.0)
    monkeypatch.setattr(system_load, "read_load", lambda: (3.0, 2))  # a load average still high from our own work
    # Over 1 s the cores were busy 2.0 CPU-s, 1.9 of them this process's: others used 0.1 core.
    monkeypatch.setattr(system_load, "read_cpu_times", CpuReadings((10.0, 5.0, 100.0), (12.0, 6.9, 101.0)))
    quiet = system_load.machine_load(torch.device("cpu"))
    assert quiet.others == pytest.approx(0.1) and not quiet.busy
    assert quiet.as_dict()["others_from"] == "cpu-time"
    # Negative control: the same load average with the busy time coming from someone else is refused.
    monkeypatch.setattr(system_load, "read_cpu_times", CpuReadings((10.0, 5.0, 100.0), (12.0, 5.0, 101.0)))
    busy = system_load.machine_load(torch.device("cpu"))
    assert busy.others == pytest.approx(2.0) and busy.busy and "other processes kept 2.00" in busy.describe()
    # During profiling the window is the whole run, from the reading taken at its start.
    monkeypatch.setattr(system_load, "read_cpu_times", CpuReadings((40.0, 30.0, 130.0)))
    during = system_load.machine_load(torch.device("cpu"), own_seconds=30.0, since=(10.0, 5.0, 100.0))
    assert during.others == pytest.approx((30.0 - 25.0) / 30.0) and not during.busy


def test_allow_busy_writes_a_flagged_table(tiny_target, monkeypatch):
    torch.set_num_threads(1)
    monkeypatch.setattr(system_load, "read_load", LoadReadings(3.0, 3.0))
    with pytest.warns(UserWarning, match="--allow-busy: the table is written and flagged") as caught:
        table = profile_target(tiny_target, ProfileConfig(**SMALL, allow_busy=True))
    # said once, busy before and during (it printed twice); one thread is "1 torch thread"
    assert len(caught) == 1 and "with 1 torch thread)" in str(caught[0].message), [str(w.message) for w in caught]
    load = table.metadata["machine_load"]
    assert load["busy"] and load["before"]["load_1min"] == 3.0 and load["before"]["busy"]
    monkeypatch.setattr(system_load, "read_load", LoadReadings(0.1, 0.3))
    quiet = profile_target(tiny_target, ProfileConfig(**SMALL))
    assert not quiet.metadata["machine_load"]["busy"]
    assert quiet.metadata["machine_load"]["after"]["load_1min"] == 0.3


def test_config_validation():
    with pytest.raises(Exception, match="max_tokens"):
        ProfileConfig(max_tokens=0)
    with pytest.raises(Exception, match="reference_tokens"):
        ProfileConfig(max_tokens=2, reference_tokens=3)
    assert ProfileConfig(contexts=[1024, 256, 256]).contexts == [256, 1024]


def test_device_name_cpu():
    name = identity.device_name("cpu")
    assert re.search(r", \d+ threads?$", name) and "(R)" not in name


def test_batched_verify_grid_is_profiled_and_read_by_the_batched_scheduler(tiny_target, tmp_path):
    """--batch-requests times serve's padded verify (R sequences × W tokens at the first context) under the
    same drift control; the table keeps the grid and the batched scheduler reads it (R = 1 is the table's own
    row, between profiled counts linear, past the largest linear in the last two)."""
    from minispark.serving.batch_schedule import batch_sps

    table = profile_target(tiny_target, ProfileConfig(contexts=[8, 16], max_tokens=3, batch_requests=[4, 2, 2],
                                                      rounds=2, warmup=0, cooldown_s=0.0))
    grid = table.batched
    assert grid["context"] == 8 and grid["requests"] == [2, 4] and grid["widths"] == [1, 2, 3]
    assert set(table.metadata["drift"]) == {"8", "16", "batched"}
    assert SPSTable.load(table.save(tmp_path / "t.json")).batched == grid
    two, four = grid["seconds"]
    assert table.batched_seconds(2, 3) == two[2] and table.batched_seconds(4, 1) == four[0]
    assert table.batched_seconds(1, 2) == pytest.approx(table.step_seconds(2, 8))
    assert table.batched_seconds(3, 2) == pytest.approx((two[1] + four[1]) / 2)
    assert table.batched_seconds(6, 2) == pytest.approx(four[1] + max(four[1] - two[1], 0.0))
    sps = batch_sps(table, 4, 3, envelope=False)
    assert [sps(w) for w in (1, 2, 3)] == pytest.approx([1 / s for s in four])
    with pytest.raises(MinisparkError, match="batch_requests: counts >= 2 only"):
        ProfileConfig(max_tokens=3, batch_requests=[1])

def test_a_users_file_at_the_tables_name_is_refused_before_measuring(tiny_dir, tmp_path, monkeypatch):
    """profile --out DIR where DIR holds someone's file of the table's name: refused once the target loads (the
    name needs its device and name), not after minutes of measuring; the file is left as it was."""
    from minispark.measuring import profiler
    from minispark.serving.sps import SPSTableError

    measured = []
    monkeypatch.setattr(profiler, "profile_target", lambda *a, **k: measured.append(a))
    target = load_target(str(tiny_dir("llama")))
    clash = tmp_path / table_filename(profiler.device_name(target.device), target.name)
    clash.write_text("my notes\n")
    with pytest.raises(SPSTableError, match="is not an SPS table minispark wrote"):
        profiler.run_profile(ProfileConfig(**SMALL), target=str(tiny_dir("llama")), out_dir=tmp_path,
                             show_progress=False)
    assert measured == [] and clash.read_text() == "my notes\n"


def test_no_context_that_fits_is_one_error_without_a_notice_first(tiny_target) -> None:
    """Every context too long printed the 'skipping contexts' notice, then an error saying the same thing."""
    config = ProfileConfig(contexts=[5000, 6000], max_tokens=3, rounds=1, warmup=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a notice would be raised here instead of the error below
        with pytest.raises(MinisparkError, match=r"contexts: none of \[5000, 6000\] leaves room"):
            profile_target(tiny_target, config)
