"""Synthetic workloads (seeded), presets, Poisson arrivals, and the trace loader on real and bad files."""

import numpy as np
import pytest

from simulation.traces import DEFAULT_MAX_ROWS, TraceError, load_trace_csv
from simulation.workloads import (PRESETS, Fixed, LogNormal, TotalLengthSpec, Uniform,
                                  poisson_arrivals, preset)
from support.paths import trace


def test_same_seed_same_workload_different_seed_different():
    spec = TotalLengthSpec(lengths=LogNormal(mean=2048, sigma=0.8))
    first = spec.generate(1000, np.random.default_rng(1))
    again = spec.generate(1000, np.random.default_rng(1))
    other = spec.generate(1000, np.random.default_rng(2))
    np.testing.assert_array_equal(first.prompt_tokens, again.prompt_tokens)
    np.testing.assert_array_equal(first.output_tokens, again.output_tokens)
    assert not np.array_equal(first.total_tokens, other.total_tokens)


def test_lognormal_mean_and_quantiles():
    draws = LogNormal(mean=2048, sigma=0.5).sample(200_000, np.random.default_rng(0))
    assert draws.mean() == pytest.approx(2048, rel=0.01)
    # Median 167, P90 372 (the arXiv outputs): sigma = ln(372/167) / 1.2816 = 0.625.
    fitted = LogNormal.from_median_p90(median=167, p90=372)
    assert fitted.sigma == pytest.approx(np.log(372 / 167) / 1.2815515655, rel=1e-9)
    draws = fitted.sample(200_000, np.random.default_rng(0))
    assert np.median(draws) == pytest.approx(167, rel=0.02)
    assert np.percentile(draws, 90) == pytest.approx(372, rel=0.02)


def test_uniform_fixed_and_split():
    draws = Uniform(low=10, high=12).sample(10_000, np.random.default_rng(0))
    assert set(np.unique(draws)) == {10, 11, 12}
    workload = TotalLengthSpec(lengths=Fixed(length=100), prompt_fraction=0.25).generate(
        5, np.random.default_rng(0))
    assert workload.prompt_tokens.tolist() == [25] * 5
    assert workload.output_tokens.tolist() == [75] * 5
    with pytest.raises(ValueError, match="low"):
        Uniform(low=5, high=4)


def test_presets_carry_source_and_assumption():
    sharegpt = preset("sharegpt")
    assert "161" in sharegpt.source and "338" in sharegpt.source
    assert "assumed" in sharegpt.assumption
    workload = sharegpt.spec.generate(200_000, np.random.default_rng(0))
    assert workload.prompt_tokens.mean() == pytest.approx(161, rel=0.02)
    assert workload.output_tokens.mean() == pytest.approx(338, rel=0.02)
    assert all(p.source for p in PRESETS)


def test_poisson_arrivals_rate():
    arrivals = poisson_arrivals(50_000, 4.0, np.random.default_rng(0))
    assert arrivals[0] == 0 and np.all(np.diff(arrivals) >= 0)
    assert (arrivals.size - 1) / arrivals[-1] == pytest.approx(4.0, rel=0.02)


def test_splitwise_conv_trace():
    workload = load_trace_csv(trace("splitwise_conv.csv"))
    assert workload.size == 19_366  # README
    assert workload.arrival_s[0] == 0 and np.all(np.diff(workload.arrival_s) >= 0)
    assert workload.source == "splitwise_conv.csv"


def test_arxiv_trace_matches_published_statistics():
    workload = load_trace_csv(trace("arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"))
    assert workload.arrival_s is None
    # README: prompt mean 2588 / median 2730 / P90 3702; output mean 291 / median 167 / P90 372.
    assert workload.prompt_tokens.mean() == pytest.approx(2588, abs=1)
    assert np.median(workload.prompt_tokens) == 2730
    assert np.percentile(workload.prompt_tokens, 90) == pytest.approx(3702, abs=1)
    assert workload.output_tokens.mean() == pytest.approx(291, abs=1)
    assert np.median(workload.output_tokens) == 167
    assert np.percentile(workload.output_tokens, 90) == pytest.approx(372, abs=1)


HEADER = b"arrived_at,num_prefill_tokens,num_decode_tokens\n"


@pytest.mark.parametrize("content, message", [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not a CSV"),
    (b"", "not a CSV"),
    (b"just one column\n1\n2\n", "not a CSV"),
    (b"arrived_at,num_prefill_tokens\n0,5\n", "missing output column"),
    (b"time,tokens_in,tokens_out\n0,5,6\n", "missing prompt column"),
    (HEADER + b"0,10,5\n1,-3,5\n", "row 2, column num_prefill_tokens: negative"),
    (HEADER + b"0,10,5\n1,3,NaN\n", "row 2, column num_decode_tokens: missing"),
    (HEADER + b"0,10,5\n1,3,\n", "row 2, column num_decode_tokens: empty"),
    (HEADER + b"0,10,5\n1,3,5\n2,ten,5\n", "row 3, column num_prefill_tokens: not a number"),
    (HEADER + b"0,10,5\nsoon,3,5\n", "row 2, column arrived_at: not a number"),
    (HEADER + b"0,10.5,5\n", "row 1, column num_prefill_tokens: not a whole number"),
    (HEADER + b"0,0,5\n", "row 1, column num_prefill_tokens: a prompt needs at least 1 token"),
    (HEADER, "no rows"),
])
def test_bad_traces_name_the_problem(content, message):
    with pytest.raises(TraceError, match=message):
        load_trace_csv(content)


def test_row_limit():
    rows = b"".join(b"%d,10,5\n" % i for i in range(11))
    with pytest.raises(TraceError, match="more than 10 rows"):
        load_trace_csv(HEADER + rows, max_rows=10)
    assert load_trace_csv(HEADER + rows, max_rows=11).size == 11
    assert DEFAULT_MAX_ROWS >= 28_257  # the largest shared trace loads


def test_column_limit_counts_the_header_as_the_parser_splits_it():
    from simulation.traces import MAX_TRACE_COLUMNS

    def trace(n_columns: int, header_extra: bytes = b"") -> bytes:
        extra = [b"x%d" % i for i in range(n_columns - 2)]
        return (b",".join([b"num_prefill_tokens", b"num_decode_tokens", *extra]) + header_extra + b"\n"
                + b",".join([b"10", b"5", *[b"0"] * (n_columns - 2)]) + b"\n")

    assert load_trace_csv(trace(MAX_TRACE_COLUMNS)).size == 1
    with pytest.raises(TraceError, match=f"{MAX_TRACE_COLUMNS + 1} columns, more than {MAX_TRACE_COLUMNS}"):
        load_trace_csv(trace(MAX_TRACE_COLUMNS + 1))
    # 300 commas inside one quoted header name are one column, not 301.
    quoted = (b'num_prefill_tokens,num_decode_tokens,"' + b"," * 300 + b'"\n10,5,0\n')
    assert load_trace_csv(quoted).size == 1


def test_unsorted_arrivals_are_sorted_with_their_rows():
    workload = load_trace_csv(HEADER + b"5,50,1\n2,20,2\n3,30,3\n")
    assert workload.arrival_s.tolist() == [0.0, 1.0, 3.0]
    assert workload.prompt_tokens.tolist() == [20, 30, 50]
