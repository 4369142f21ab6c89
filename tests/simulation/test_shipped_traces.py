"""The shipped traces are the published ones: row counts and the arXiv set's published statistics."""

import numpy as np

from simulation.traces import load_trace_csv, shipped_trace_names
from support.paths import TRACES, trace


def test_the_three_traces_ship_with_their_licence():
    assert shipped_trace_names() == ("arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
                                     "splitwise_code.csv", "splitwise_conv.csv")
    readme = (TRACES / "README.md").read_text()
    assert "CC-BY" in readme and "MIT" in readme


def test_row_counts_match_the_published_traces():
    # microsoft/vidur data/processed_traces: 19,366 conversation and 8,819 code requests.
    assert load_trace_csv(trace("splitwise_conv.csv")).prompt_tokens.size == 19_366
    assert load_trace_csv(trace("splitwise_code.csv")).prompt_tokens.size == 8_819


def test_arxiv_prompt_statistics_match_the_published_summary():
    # Published: prompt mean 2,588, median 2,730, P90 3,702 tokens.
    workload = load_trace_csv(trace("arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"))
    prompts = np.asarray(workload.prompt_tokens)
    assert round(float(prompts.mean())) == 2588
    assert round(float(np.median(prompts))) == 2730
    assert abs(float(np.percentile(prompts, 90)) - 3702) <= 1
