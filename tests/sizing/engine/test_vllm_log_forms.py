"""The forms real start-up logs take (tests/data/vllm_logs/forms, hand-written; the README says
where each form was seen): padded spacing, wrapped messages, the profile summary, and hostile
figures, which are ignored by name and never raise."""

from __future__ import annotations

import time

import pytest

from inputs.errors import InputError
from sizing.engine.vllm_log import parse_vllm_log
from support.paths import ROOT

FORMS = ROOT / "tests" / "data" / "vllm_logs" / "forms"


def _parsed(name: str):
    return parse_vllm_log((FORMS / name).read_bytes(), field_name=name)


def test_padded_spacing_reads_the_same_figures():
    parsed = _parsed("padded-qwen3-8b.log")
    assert (parsed.available_gib, parsed.kv_tokens) == (12.5, 91_008)
    assert (parsed.concurrency_len, parsed.concurrency) == (8192, 11.11)
    assert parsed.model == "/models/Qwen/Qwen3-8B" and parsed.tp == 1


def test_wrapped_profile_summary_ending_in_current_kv_cache_memory():
    parsed = _parsed("profile-summary-wrapped.log")
    assert (parsed.total_gib, parsed.gpu_memory_utilization, parsed.requested_gib) == (83.05, 0.95, 78.9)
    assert (parsed.weights_gib, parsed.activation_gib, parsed.non_torch_gib, parsed.cuda_graph_gib) == (
        43.21, 0.92, 0.12, 0.45)
    assert parsed.available_gib == 34.2  # "Current kv cache memory in use is 34.2 GiB."
    assert not parsed.refused


def test_consumed_memory_variant_keeps_weights_and_non_torch_together():
    parsed = _parsed("profile-summary-consumed.log")
    assert (parsed.consumed_gib, parsed.activation_gib, parsed.cuda_graph_gib) == (4.06, 1.65, 0.55)
    assert parsed.weights_gib is None and parsed.non_torch_gib is None
    assert (parsed.total_gib, parsed.available_gib) == (8.0, 1.08)


def test_refusal_of_vllm_main_wrapped_over_three_lines():
    parsed = _parsed("refusal-wrapped-main.log")
    assert parsed.refused
    assert (parsed.max_model_len, parsed.needed_gib, parsed.available_gib, parsed.estimated_max_len) == (
        16_384, 3.0, 0.18, 976)
    needed = next(f for f in parsed.found if f.field == "needed_gib")
    assert needed.line_no == 6  # the line the wrapped message starts on


def test_one_line_refusal_is_read_once():
    text = ("(EngineCore pid=9) ValueError: To serve at least one request with the models's max seq len (40960), "
            "(5.62 GiB KV cache is needed, which is larger than the available KV cache memory (2.40 GiB). Based on "
            "the available memory, the estimated maximum model length is 17472. Try increasing ...\n")
    parsed = parse_vllm_log(text)
    assert (parsed.max_model_len, parsed.needed_gib, parsed.available_gib, parsed.estimated_max_len) == (
        40_960, 5.62, 2.4, 17_472)
    assert [f.field for f in parsed.found].count("needed_gib") == 1


def test_absurd_figures_are_ignored_by_name_and_the_rest_kept():
    parsed = _parsed("absurd-figures.log")
    assert parsed.available_gib == 6.51
    assert parsed.kv_tokens is None and parsed.weights_gib is None and parsed.concurrency is None
    reasons = {f.line_no: (f.field, f.reason) for f in parsed.ignored}
    assert reasons[2][0] == "kv_tokens" and "outside" in reasons[2][1]
    assert reasons[3][0] == "concurrency_len, concurrency" and "concurrency_len 0 " in reasons[3][1]
    assert "-32,768" in reasons[4][1]
    assert reasons[5][0] == "weights_gib"
    assert parsed.max_model_len is None  # "max seq len (-5)" is no length
    assert parsed.as_dict()["ignored"][0]["field"] == "kv_tokens"


def test_a_log_of_only_absurd_figures_is_refused_naming_them():
    with pytest.raises(InputError) as err:
        parse_vllm_log("INFO vllm GPU KV cache size: " + "9" * 400 + " tokens\n")
    assert err.value.field == "log" and "kv_tokens" in err.value.message and "line 1" in err.value.message


def test_a_command_line_utilisation_does_not_pass_for_a_profile():
    with pytest.raises(InputError, match="not a vLLM start-up log"):
        parse_vllm_log("vllm serve --gpu_memory_utilization=0.98 --tensor_parallel_size 2\n")


def test_long_digit_runs_parse_in_linear_time():
    # Before the figure pattern was made unambiguous ("-?[\d,]*\.?\d+"), each of these lines
    # cost a quadratic backtrack over its 8,000-character clip: about 30 s for the 30 lines.
    digits = "1" * 100_000
    forms = (f"Available KV cache memory: {digits} GiX", f"GPU KV cache size: {digits} tokenz",
             f"Maximum concurrency for {digits} tokens per request: {digits}y",
             f"max seq len ({digits}), {digits} GiB KV cache is needed, larger than the available KV cache memory",
             f"total_gpu_memory={digits}GiX non_torch_memory={digits}",
             f"Current kv cache memory in use is {digits} GiX")
    text = "\n".join(f"INFO vllm {forms[i % len(forms)]}" for i in range(30)) + "\nAvailable KV cache memory: 1.5 GiB\n"
    start = time.perf_counter()
    parsed = parse_vllm_log(text)
    assert time.perf_counter() - start < 1.0
    assert parsed.available_gib == 1.5


def test_figures_with_commas_decimals_and_leading_points():
    parsed = parse_vllm_log("INFO vllm Available KV cache memory: .5 GiB\nGPU KV cache size: 1,234,567 tokens\n"
                            "Maximum concurrency for 131,072 tokens per request: 0.25x\n")
    assert (parsed.available_gib, parsed.kv_tokens, parsed.concurrency_len, parsed.concurrency) == (
        0.5, 1_234_567, 131_072, 0.25)
