"""Streaming results: jobs.csv written as the run goes equals the in-memory one, summaries are
equal, a failed run leaves no jobs.csv, and what a long run keeps is bounded by the running jobs."""

from __future__ import annotations

import math
import random
from functools import cache
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.runs import job_server_names, load_jobs
from simulator.build import build_policy, build_simulation
from simulator.policies.heuristics import MinFeasible, ParaMax
from simulator.records import (
    SERVERS_LISTED_MAX,
    CsvStreamSink,
    ExactSum,
    format_servers,
    records_to_csv,
    summarise,
)
from simulator.run import run_config
from simulator.topology import RampTopology
from tests.conftest import CONF_DIR

#: Summary keys that measure the machine, not the run.
_WALL_KEYS = {"wall_time_s", "events_per_s", "jobs_per_s", "lookahead_wall_s"}


@cache
def _cfg(*overrides: str):
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return compose("sim", list(overrides))


def _same_run(summary_a: dict, summary_b: dict) -> None:
    a = {k: v for k, v in summary_a.items() if k not in _WALL_KEYS}
    b = {k: v for k, v in summary_b.items() if k not in _WALL_KEYS}
    assert a.keys() == b.keys()
    for key, value in a.items():
        if isinstance(value, float) and math.isnan(value):
            assert math.isnan(b[key]), key
        else:
            assert b[key] == value, key


CASES = {
    "paper_drain": ("scenario=paper", "horizon_accounting=drain", "policy=para_max"),
    "paper_paper": ("scenario=paper", "horizon_accounting=paper", "policy=min_feasible"),
    "physical_poisson": ("scenario=physical", "cluster=ramp64", "arrivals=poisson", "policy=para_max",
                         "mean_interarrival_s=0.05", "horizon_s=40"),
    "trace_replay": ("scenario=physical", "arrivals=trace", "workload=all", "horizon_s=null", "policy=min_feasible"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_streamed_jobs_csv_and_summary_equal_the_in_memory_ones(case: str, tmp_path: Path) -> None:
    cfg = _cfg(*CASES[case])
    memory = build_simulation(cfg).run(build_policy(cfg))  # own caches each: their hit counts are equal too
    sink = CsvStreamSink(tmp_path / "jobs.csv", flush_rows=7)  # many small flushes
    sim = build_simulation(cfg, sink=sink)
    streamed = sim.run(build_policy(cfg))
    assert streamed.records == [] and sim.records == []
    text = (tmp_path / "jobs.csv").read_text()
    assert text == records_to_csv(memory.records)  # byte for byte, job-id order
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs.csv"]  # no temporary file left
    assert sink.rows_written == len(memory.records) == memory.summary["num_jobs_arrived"]
    _same_run(memory.summary, streamed.summary)
    # ... and the one-shot summarise of the records agrees with the running totals.
    _same_run({**memory.summary, **summarise(memory.records, window_s=memory.summary["window_s"],
                                             num_servers=sim.topology.num_servers)}, memory.summary)
    if case == "paper_paper":
        assert memory.summary["blocked_by_reason"]["running_at_horizon"] > 0
        assert memory.summary["num_jobs_unresolved"] == 1


def test_pacml_sim_streams_and_a_failed_run_leaves_no_jobs_csv(tmp_path: Path) -> None:
    cfg = _cfg("scenario=paper", "policy=para_max", "progress=false")
    summary = run_config(cfg, tmp_path / "ok")
    assert summary["num_jobs_arrived"] == 1001
    assert len(load_jobs(tmp_path / "ok", expected_jobs=1001)) == 1001
    assert sorted(p.name for p in (tmp_path / "ok").iterdir()) == ["jobs.csv", "summary.json"]

    class Crash(ParaMax):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def decide(self, job, state):
            self.calls += 1
            if self.calls > 300:  # well after the first chunk of rows was written
                raise KeyboardInterrupt
            return super().decide(job, state)

    sink = CsvStreamSink(tmp_path / "crash" / "jobs.csv", flush_rows=10)
    with pytest.raises(KeyboardInterrupt):
        build_simulation(cfg, sink=sink).run(Crash())
    assert sink.rows_written > 100
    assert list((tmp_path / "crash").iterdir()) == []


def test_reorder_buffer_and_simulator_state_stay_at_the_running_jobs(tmp_path: Path) -> None:
    """A long cheap episode: what waits to be written is bounded by the jobs that arrive while
    the oldest running job runs, far below the episode, and the heap of end times by the
    running jobs."""
    cfg = _cfg("scenario=physical", "cluster=ramp64", "arrivals=poisson", "policy=para_max",
               "mean_interarrival_s=0.05", "horizon_s=150")
    memory = build_simulation(cfg).run(ParaMax())
    records = memory.records
    arrivals = [r.arrival_time_s for r in records]
    # A record waits at most for the jobs arrived while some earlier job was still running.
    bound = max(sum(1 for t in arrivals if r.arrival_time_s <= t <= r.start_time_s + r.jct_s)
                for r in records if r.started)
    sink = CsvStreamSink(tmp_path / "jobs.csv")
    sim = build_simulation(cfg, sink=sink)
    biggest_heap = 0
    policy = ParaMax()
    policy.reset(sim.seed)
    while (job := sim.next_job()) is not None:
        sim.apply(policy.decide(job, sim.state()))
        biggest_heap = max(biggest_heap, len(sim._ends))
        assert len(sim._running_sorted) == len(sim._running)
    sim.finalize()
    assert (tmp_path / "jobs.csv").read_text() == records_to_csv(records)
    assert len(records) > 2500
    assert 0 < sink.max_buffered <= bound < len(records) // 20
    assert biggest_heap <= 65  # one job per server at most, plus one finished not yet dropped


def test_a_kept_state_still_lists_the_jobs_running_at_its_decision() -> None:
    """``running`` is built lazily; a state a policy keeps and reads later must not see later jobs."""
    cfg = _cfg("scenario=paper", "policy=min_feasible", "horizon_s=200000")

    class Keep(MinFeasible):
        def __init__(self, read_now: bool) -> None:
            super().__init__()
            self.read_now, self.seen = read_now, []

        def decide(self, job, state):
            self.seen.append((state, state.running if self.read_now else None))
            return super().decide(job, state)

    eager, lazy = Keep(True), Keep(False)
    build_simulation(cfg).run(eager)
    build_simulation(cfg).run(lazy)
    assert len(eager.seen) == len(lazy.seen) > 100
    assert any(running for _, running in eager.seen)
    for (_, running), (state, _) in zip(eager.seen, lazy.seen, strict=True):
        assert state.running == running
        assert [(e, m.bit_count()) for e, m in running] == list(state.releases)

    class Releases(MinFeasible):
        """Reads ``releases`` first (the simulation's own counts, not the masks' bits)."""

        def __init__(self) -> None:
            super().__init__()
            self.seen: list = []

        def decide(self, job, state):
            self.seen.append(state.releases)
            return super().decide(job, state)

    first = Releases()
    build_simulation(cfg).run(first)
    assert [tuple((e, m.bit_count()) for e, m in running) for _, running in eager.seen] == first.seen


def test_exact_sum_does_not_depend_on_order() -> None:
    rng = random.Random(0)
    terms = [rng.choice([1e16, 1.0, 1e-9, 3.3e5]) * rng.uniform(-1, 1) for _ in range(3000)]
    expected = math.fsum(terms)
    for _ in range(3):
        rng.shuffle(terms)
        total = ExactSum(fold_every=17)  # fold often: the folded partials must stay exact
        for x in terms:
            total.add(x)
        assert total.value == expected
    assert math.isnan(_summed([1.0, math.inf, -math.inf])) and _summed([2.0, math.inf]) == math.inf


def _summed(terms: list[float]) -> float:
    total = ExactSum()
    for x in terms:
        total.add(x)
    return total.value


def _box(topo: RampTopology, shape: tuple[int, int, int], start: tuple[int, int, int]) -> list[int]:
    C, R, S = topo.shape
    (x, y, z), (i, j, k) = shape, start
    return sorted(topo.index((i + a) % C, (j + b) % R, (k + c) % S) for a in range(x) for b in range(y) for c in range(z))


@cache
def _big() -> RampTopology:
    return RampTopology(64, 64, 16, max_degree=1024)


@pytest.mark.parametrize(("shape", "start", "written"), [
    ((32, 32, 1), (0, 0, 0), "0..31-0..31-0"),
    ((16, 16, 4), (3, 5, 2), "3..18-5..20-2..5"),
    ((8, 8, 16), (60, 0, 0), "0..3-0..7-0..15 60..63-0..7-0..15"),  # wraps round the groups
    ((64, 16, 1), (0, 56, 9), "0..63-0..7-9 0..63-56..63-9"),
])
def test_big_jobs_write_their_servers_as_boxes(shape, start, written) -> None:
    topo = _big()
    servers = _box(topo, shape, start)
    text = format_servers(topo, servers)
    assert text == written
    names = [topo.server_name(s) for s in servers]
    assert job_server_names(text) == names


def test_small_jobs_keep_the_original_server_list() -> None:
    topo = _big()
    servers = _box(topo, (8, 8, 1), (1, 2, 3))
    assert len(servers) == SERVERS_LISTED_MAX
    assert format_servers(topo, servers) == " ".join(topo.server_name(s) for s in servers)
    assert job_server_names("0-0-0 1-0-0") == ["0-0-0", "1-0-0"] and job_server_names("") == []
    for bad in ("0-0", "1..0-0-0", "a-0-0", "0-0-0-0"):
        with pytest.raises(ValueError, match="bad server"):
            job_server_names(bad)


@settings(max_examples=25, deadline=None)
@given(st.sets(st.integers(0, 8 * 6 * 4 - 1), min_size=SERVERS_LISTED_MAX + 1, max_size=150))
def test_any_server_set_round_trips(servers: set[int]) -> None:
    topo = _small()
    ordered = sorted(servers)
    text = format_servers(topo, ordered)
    assert job_server_names(text) == [topo.server_name(s) for s in ordered]


@cache
def _small() -> RampTopology:
    return RampTopology(8, 6, 4)


def test_a_new_run_clears_the_temporary_file_a_killed_run_left(tmp_path: Path) -> None:
    stale = tmp_path / ".jobs.csv.k1ll3d.tmp"
    stale.write_text("half a file")
    sink = CsvStreamSink(tmp_path / "jobs.csv")
    sink.close()
    assert not stale.exists() and (tmp_path / "jobs.csv").exists()


def test_a_garbled_server_box_is_refused_before_it_is_expanded() -> None:
    with pytest.raises(ValueError, match="more than 65,536 servers"):
        job_server_names("0..99999999-0..99999999-0..99999999")
