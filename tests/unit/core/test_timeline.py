from __future__ import annotations

import threading

import pytest

from harness.core.timeline import Sample, Timeline, latency_percentile, longest_gap_seconds, success_ratio, summarize


def series(pattern: str, start: float = 100.0, step: float = 0.5) -> list[Sample]:
    """'1' = success, '0' = failure, one sample every ``step`` seconds from ``start``."""
    return [Sample(t=start + i * step, ok=c == "1") for i, c in enumerate(pattern)]


def test_sample_round_trip_and_hashable():
    s = Sample(t=1.0, ok=False, latency_seconds=0.2, detail="refused", labels={"target": "pod-x"})
    assert Sample.from_dict(s.to_dict()) == s
    assert s.to_dict() == {"t": 1.0, "ok": False, "latency_seconds": 0.2, "detail": "refused",
                           "labels": {"target": "pod-x"}}
    assert len({s, Sample.from_dict(s.to_dict())}) == 1


def test_timeline_window_is_half_open_and_sorted():
    tl = Timeline("http")
    for sample in reversed(series("1101")):
        tl.add(sample)
    assert len(tl) == 4
    assert [s.t for s in tl.samples()] == [100.0, 100.5, 101.0, 101.5]
    assert [s.t for s in tl.samples(start=100.5, end=101.5)] == [100.5, 101.0]
    assert tl.to_list()[0]["t"] == 100.0


def test_timeline_is_thread_safe():
    tl = Timeline("p")

    def worker(offset: int) -> None:
        for i in range(500):
            tl.add(Sample(t=offset * 1000 + i, ok=True))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(tl) == 4000 and len(set(s.t for s in tl.samples())) == 4000


def test_success_ratio():
    samples = series("1101")
    assert success_ratio(samples) == 0.75
    assert success_ratio(samples, start=100.5, end=101.5) == 0.5
    assert success_ratio(samples, start=100.5, end=101.0) == 1.0  # the sample at the end is the next window's
    assert success_ratio(samples, start=200) is None
    assert success_ratio([]) is None


def test_gap_is_zero_when_all_succeed_or_no_samples():
    assert longest_gap_seconds(series("1111")) == 0.0
    assert longest_gap_seconds([]) == 0.0


def test_gap_runs_from_last_success_to_next_success():
    # successes at 100.0 and 102.0 with failures between: 2 s without success
    assert longest_gap_seconds(series("10001")) == pytest.approx(2.0)


def test_longest_of_several_gaps():
    # gaps: 100.0 -> 101.0 (1 s) and 101.5 -> 103.5 (2 s)
    assert longest_gap_seconds(series("10110001")) == pytest.approx(2.0)


def test_leading_failures_count_from_window_start():
    samples = series("0011")  # 100.0, 100.5 fail; 101.0 ok
    assert longest_gap_seconds(samples) == pytest.approx(1.0)  # from the first sample
    assert longest_gap_seconds(samples, start=99.0) == pytest.approx(2.0)  # from the window start


def test_trailing_failures_count_to_last_sample_or_window_end():
    samples = series("1100")  # last success 100.5, last sample 101.5
    assert longest_gap_seconds(samples) == pytest.approx(1.0)
    assert longest_gap_seconds(samples, end=105.0) == pytest.approx(4.5)


def test_samples_outside_window_are_ignored():
    samples = series("0000110")  # 100..103
    # window [101.5, 103.0]: 101.5 fail, 102.0 ok, 102.5 ok, 103.0 fail
    assert longest_gap_seconds(samples, start=101.5, end=103.0) == pytest.approx(0.5)


def test_all_failures_gap_spans_window():
    assert longest_gap_seconds(series("000"), start=99.0, end=110.0) == pytest.approx(11.0)


def test_unsorted_input_is_handled():
    assert longest_gap_seconds(list(reversed(series("10001")))) == pytest.approx(2.0)


def test_latency_percentile_nearest_rank():
    samples = [Sample(t=i, ok=True, latency_seconds=float(v)) for i, v in enumerate([5, 1, 4, 2, 3])]
    samples.append(Sample(t=9, ok=False, latency_seconds=100.0))
    samples.append(Sample(t=10, ok=True))  # no latency: ignored
    assert latency_percentile(samples, 50) == 3.0
    assert latency_percentile(samples, 0) == 1.0
    assert latency_percentile(samples, 100) == 5.0
    assert latency_percentile(samples, 99) == 5.0
    assert latency_percentile(samples, 20) == 1.0
    assert latency_percentile(samples, 21) == 2.0
    assert latency_percentile(samples, 100, ok_only=False) == 100.0
    assert latency_percentile([Sample(t=0, ok=True)], 50) is None
    with pytest.raises(ValueError):
        latency_percentile(samples, 101)


def test_summarize_keys_and_values():
    samples = [Sample(t=100.0, ok=True, latency_seconds=0.01), Sample(t=100.5, ok=False),
               Sample(t=101.0, ok=False), Sample(t=101.5, ok=True, latency_seconds=0.03)]
    summary = summarize("http", samples)
    assert summary == {
        "name": "http", "samples": 4, "successes": 2, "failures": 2, "success_ratio": 0.5,
        "longest_gap_seconds": 1.5, "first_sample_at": 100.0, "last_sample_at": 101.5,
        "latency_p50_seconds": 0.01, "latency_p99_seconds": 0.03,
    }


def test_summarize_empty():
    summary = summarize("dns", [])
    assert summary["samples"] == 0 and summary["success_ratio"] is None
    assert summary["first_sample_at"] is None and summary["latency_p99_seconds"] is None


def test_timeline_summary_with_window():
    tl = Timeline("api")
    for s in series("110011"):
        tl.add(s)
    assert tl.summary(start=101.0)["samples"] == 4
    assert tl.summary()["longest_gap_seconds"] == pytest.approx(1.5)


def test_failure_reasons_counts_the_commonest_failures_in_the_window_only():
    from harness.core.timeline import Sample, failure_reasons

    samples = [Sample(1, False, detail="dns: [Errno -3] Temporary failure"), Sample(2, True),
               Sample(3, False, detail="dns: [Errno -3] Temporary failure"), Sample(4, False, detail="timeout"),
               Sample(9, False, detail="outside the window")]
    assert failure_reasons(samples, 0, 5) == [("dns: [Errno -3] Temporary failure", 2), ("timeout", 1)]
    assert failure_reasons(samples, 0, 5, limit=1) == [("dns: [Errno -3] Temporary failure", 2)]
    assert failure_reasons([Sample(1, True)]) == []


@pytest.mark.parametrize("start, end", [(100.0, 103.0), (100.5, 101.5), (101.0, 101.0), (99.0, 100.0),
                                        (101.5, 102.0), (100.25, 102.75)])
def test_a_python_drill_and_a_data_scenario_measure_one_window_alike(start, end):
    """Both paths to a success ratio (a drill calling the timeline, a scenario naming the measure)
    give the same value on the same samples, boundary samples included: one convention, [start, end)."""
    from harness.engine import measures

    samples = series("1101001101")
    tl = Timeline("p")
    for sample in samples:
        tl.add(sample)
    expected = success_ratio(samples, start, end)
    assert measures.measure("success_ratio", samples, start, end) == expected
    assert success_ratio(tl.samples(start, end)) == expected
    assert measures.in_window(samples, start, end) == tl.samples(start, end)
    assert tl.summary(start, end)["success_ratio"] == expected
    inside = [s for s in samples if start <= s.t < end]
    assert expected == (sum(s.ok for s in inside) / len(inside) if inside else None)

