"""AppTest of the sizer page: reference figures on screen, controls move them, bad input is
reported by field and nothing typed is lost, state round-trips through the URL, hostile links
and configs show a notice instead of raising, and the last valid results stay on screen."""

import json

import pytest

from support.apptest import metric_text, open_page, texts
from support.paths import ROOT
from ui import handoff

PAGE = "1_sizer.py"


def run_page(query: dict[str, str] | None = None):
    return open_page(PAGE, query)


def key(name: str) -> str:
    """The widget key of sizer control ``name`` (the page namespaces its session keys)."""
    return f"sizer.{name}"


metric = metric_text


def test_defaults_show_the_reference_pages_70b_figures():
    at = run_page()
    # Reference problem 3: Llama-style 70B, BF16 KV, 32K context, 100 users, H100 SXM.
    assert metric(at, "KV per token") == "320 KiB"
    assert metric(at, "Per user at 32,768") == "10 GiB"
    assert metric(at, "KV, 100 users") == "1,000 GiB"
    # 1,073.7 GB of KV + 70.6 GB of FP8 weights = 1,144.3 GB over 72 GB usable: 15.9 → 16 H100s.
    assert metric(at, "GPUs needed") == "16"
    # Without GQA (64 KV heads) BF16: 2.5 MiB per token, 8,000 GiB for 100 users.
    assert metric(at, "KV per token, one KV head per query head") == "2.5 MiB"
    steps = at.markdown[[i for i, md in enumerate(at.markdown) if "163,840" in md.value][0]].value
    assert "2 × 80 × 8 × 128" in steps


def test_kv_precision_and_units_change_the_numbers():
    at = run_page()
    at.selectbox(key=key("kv_dtype")).set_value("fp8").run()
    assert metric(at, "KV per token") == "160 KiB"
    assert metric(at, "KV, 100 users") == "500 GiB"
    # 500 GiB = 536.9 GB; + 70.6 GB weights = 607.5 GB over 72 GB usable: 8.4 → 9 H100s.
    assert metric(at, "GPUs needed") == "9"
    at.radio(key=key("units")).set_value("GB (decimal)").run()
    assert metric(at, "KV, 100 users") == "536.9 GB"
    at.selectbox(key=key("gpu")).set_value("h200").run()
    # 607.5 GB over 126.9 GB usable per H200: 4.8 → 5.
    assert metric(at, "GPUs needed") == "5"


def test_state_round_trips_through_the_url():
    at = run_page()
    at.selectbox(key=key("kv_dtype")).set_value("fp8").run()
    at.number_input(key=key("users")).set_value(40).run()
    assert at.query_params["kv"] == "fp8" and at.query_params["users"] == "40"
    reopened = run_page({"kv": "fp8", "users": "40"})
    assert reopened.selectbox(key=key("kv_dtype")).value == "fp8"
    assert reopened.number_input(key=key("users")).value == 40
    assert metric(reopened, "KV, 40 users") == metric(at, "KV, 40 users") == "200 GiB"


def test_malformed_url_values_fall_back_to_defaults():
    at = run_page({"users": "lots", "kv": "fp7", "tp": "3"})
    assert metric(at, "KV per token") == "320 KiB"
    assert at.number_input(key=key("users")).value == 100


@pytest.mark.parametrize(
    "field, value, named",
    [("users", 0, "users"), ("context", -5, "context"), ("n_gpus", 3, "n_gpus")],
)
def test_bad_numbers_are_named_and_kept(field, value, named):
    at = run_page()
    at.number_input(key=key(field)).set_value(value).run()
    assert not at.exception
    assert any(named in e.value for e in at.error), [e.value for e in at.error]
    assert at.number_input(key=key(field)).value == value  # what was entered is not lost


def test_manual_shape_errors_name_the_field_and_keep_the_page_working():
    at = run_page()
    at.radio(key=key("model_source")).set_value("Manual").run()
    at.number_input(key=key("kv_heads")).set_value(7).run()  # 64 query heads do not split into 7 groups
    assert any("kv_heads" in e.value for e in at.error)
    assert at.number_input(key=key("kv_heads")).value == 7
    assert metric(at, "KV per token") == "320 KiB"  # last valid model still shown
    at.number_input(key=key("kv_heads")).set_value(64).run()
    assert metric(at, "KV per token") == "2.5 MiB"


@pytest.mark.parametrize(
    "text, named",
    [
        ("not json at all", "config"),
        ('{"num_hidden_layers": "eighty", "num_attention_heads": 64, "hidden_size": 8192}', "num_hidden_layers"),
        ('{"num_hidden_layers": -80, "num_attention_heads": 64, "hidden_size": 8192}', "num_hidden_layers"),
        ('{"num_attention_heads": 64, "hidden_size": 8192}', "num_hidden_layers"),
    ],
)
def test_hostile_config_is_reported_by_field(text, named):
    at = run_page()
    at.radio(key=key("model_source")).set_value("config.json").run()
    at.text_area(key=key("config_text")).input(text).run()
    assert not at.exception
    assert any(named in e.value for e in at.error), [e.value for e in at.error]
    assert at.text_area(key=key("config_text")).value == text
    assert metric(at, "KV per token")  # the page still renders results


def test_pasted_gemma_config_uses_its_head_dim():
    # Gemma-2-9B: hidden 3584 / 16 heads = 224, but config.json says head_dim 256.
    config = {"model_type": "gemma2", "num_hidden_layers": 42, "num_attention_heads": 16,
              "num_key_value_heads": 8, "hidden_size": 3584, "head_dim": 256,
              "intermediate_size": 14336, "vocab_size": 256000, "max_position_embeddings": 8192}
    at = run_page()
    at.radio(key=key("model_source")).set_value("config.json").run()
    at.text_area(key=key("config_text")).input(json.dumps(config)).run()
    assert not at.error
    # 2 × 42 × 8 × 256 values × 2 B = 344,064 B = 336 KiB per token (224 would give 294 KiB).
    assert metric(at, "KV per token") == "336 KiB"


def test_warnings_flag_common_mistakes():
    at = run_page()
    at.selectbox(key=key("tp")).set_value(16).run()
    at.number_input(key=key("n_gpus")).set_value(16).run()
    assert any("KV heads" in w.value for w in at.warning), [w.value for w in at.warning]
    at.slider(key=key("usable")).set_value(1.0).run()
    assert any("usable" in w.value.lower() for w in at.warning)


def test_charts_and_table_follow_the_report():
    at = run_page()
    memory = json.loads(at.get("plotly_chart")[0].proto.spec)
    names = [trace["name"] for trace in memory["data"]]
    assert names[:4] == ["Weights", "KV cache, all users", "Total GPU memory", "Usable share"]
    kv_bar = memory["data"][1]["y"][0]
    assert kv_bar == pytest.approx(1000.0)  # 1,000 GiB of BF16 KV
    tables = at.dataframe
    reference = [t.value for t in tables if "kv_precision" in t.value.columns][0]
    h100_bf16 = reference[(reference.gpu == "H100 SXM") & (reference.kv_precision.str.contains("BF16"))]
    assert int(h100_bf16.gpus_needed.iloc[0]) == 16
    assert float(h100_bf16.kv_all_users_GB.iloc[0]) == pytest.approx(1073.7)


def test_handoff_for_the_fragmentation_page():
    at = run_page()
    at.selectbox(key=key("kv_dtype")).set_value("fp8").run()
    published = at.session_state[handoff.SESSION_KEY]
    # Reference problem 4: 8 × 80 GB × 0.9 − 70.6 GB of FP8 weights ≈ 505.4 GB KV budget at TP 8.
    assert published.per_token_bytes == 163_840
    assert published.kv_budget_bytes == pytest.approx(8 * 72e9 - 70.6e9, rel=2e-3)
    assert published.max_context == 32_768
    assert (published.preset_id, published.kv_dtype, published.weight_dtype) == ("llama-3.1-70b", "fp8", "fp8")
    assert (published.gpu_id, published.tp, published.n_gpus, published.block_size) == ("h100-sxm", 8, 8, 16)
    assert published.model_name and published.summary


def test_handoff_from_a_manual_shape_names_no_preset():
    at = run_page({"src": "Manual"})
    assert at.session_state[handoff.SESSION_KEY].preset_id is None


@pytest.mark.parametrize(
    "query, parameter",
    [({"ctx": "1e308"}, "ctx"), ({"src": "Manual", "pb": "nan"}, "pb"), ({"users": "-5"}, "users"),
     ({"tp": "3"}, "tp"), ({"usable": "inf"}, "usable"), ({"ngpu": "0"}, "ngpu"), ({"gpu": "tpu-v9"}, "gpu"),
     ({"gpu": "custom", "mem": "-1e400"}, "mem"), ({"scales": "yes"}, "scales"), ({"block": "17"}, "block")],
)
def test_hostile_link_parameters_show_a_notice_and_the_default(query, parameter):
    at = run_page(query)  # open_page asserts that nothing was raised
    assert f"`{parameter}`" in texts(at.info), texts(at.info)
    assert metric(at, "KV per token") == "320 KiB"
    assert metric(at, "GPUs needed") == "16"


def test_manual_defaults_survive_a_nan_parameter_count_link():
    at = run_page({"src": "Manual", "pb": "nan"})
    assert at.number_input(key=key("params_b")).value == pytest.approx(70.6)
    assert not at.error


@pytest.mark.parametrize(
    "query, control, named",
    [({"gpu": "custom"}, "custom_mem", "gpu_memory_gb"), ({"gpu": "custom"}, "custom_bw", "gpu_bandwidth_tbs"),
     ({"src": "Manual"}, "params_b", "params")],
)
def test_nan_in_a_number_input_is_an_error_not_a_crash(query, control, named):
    # Whole-number inputs cannot hold NaN (Streamlit refuses it before the page runs); these hold floats.
    at = run_page(query)
    at.number_input(key=key(control)).set_value(float("nan")).run()
    assert not at.exception
    assert any(named in e.value for e in at.error), [e.value for e in at.error]
    assert metric(at, "KV per token")  # the last valid results stay on screen


@pytest.mark.parametrize(
    "field, value",
    [("context", -5), ("users", 0), ("n_gpus", 3)],
)
def test_invalid_input_keeps_the_last_valid_results(field, value):
    at = run_page()
    at.selectbox(key=key("kv_dtype")).set_value("fp8").run()
    assert metric(at, "KV, 100 users") == "500 GiB"
    at.number_input(key=key(field)).set_value(value).run()
    assert any(field in e.value for e in at.error), [e.value for e in at.error]
    assert "last valid results" in texts(at.caption)
    # The fp8 figures of the last valid run, not blank and not the defaults.
    assert metric(at, "KV per token") == "160 KiB"
    assert metric(at, "KV, 100 users") == "500 GiB"
    assert at.session_state[handoff.SESSION_KEY].kv_dtype == "fp8"
    at.number_input(key=key(field)).set_value({"context": 32_768, "users": 100, "n_gpus": 8}[field]).run()
    assert not at.error and "last valid results" not in texts(at.caption)


def test_tp_and_gpu_combination_error_is_shown_beside_the_controls():
    at = run_page()
    at.selectbox(key=key("tp")).set_value(16).run()  # 8 GPUs do not form a TP group of 16
    assert any("n_gpus" in e.value for e in at.error), [e.value for e in at.error]
    assert "last valid results" in texts(at.caption)
    assert metric(at, "GPUs needed") == "16"


@pytest.mark.parametrize("architectures", ['{"a": 1}', "5", '"LlamaForCausalLM"'])
def test_config_with_non_list_architectures_is_refused_by_field(architectures):
    text = ('{"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, '
            '"hidden_size": 8192, "intermediate_size": 28672, "vocab_size": 128256, '
            f'"architectures": {architectures}}}')
    at = run_page()
    at.radio(key=key("model_source")).set_value("config.json").run()
    at.text_area(key=key("config_text")).input(text).run()
    assert not at.exception
    assert any("architectures" in e.value for e in at.error), [e.value for e in at.error]
    assert metric(at, "KV per token") == "320 KiB"


def test_engine_mode_shows_vllm_figures_and_explains_a_pasted_log():
    at = run_page({"eng": "1", "model": "llama-3.1-8b", "tp": "1", "ngpu": "1", "ctx": "8192", "gpu": "h200"})
    assert metric(at, "GPU KV cache size").endswith("tokens")
    commands = [c.value for c in at.code]
    assert any(c.startswith("vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 1") for c in commands)
    assert any("sglang.launch_server" in c for c in commands)
    log = (ROOT / "tests" / "data" / "vllm_logs" / "qwen3-14b-lmcache.log").read_text()
    at.text_area(key="engine_log_text").set_value(log).run()
    assert not at.exception
    assert not at.error
    checks = next(d.value for d in at.dataframe if "figure" in d.value.columns)
    # The page's model (Llama-3.1-8B, 128 KiB/token) is not the log's Qwen3-14B: the rebuilt
    # token count is the log's 6.51 GiB ÷ 2 MiB blocks, and it says so by not matching.
    assert list(checks["figure"])[0] == "GPU KV cache size (tokens)"
    assert checks["rebuilt"][0] == 6.51 * 2**30 // (16 * 131_072) * 16 and not checks["matches"][0]


def test_engine_mode_refusals_are_named_and_keep_the_last_figures():
    at = run_page({"eng": "1", "model": "llama-3.1-8b", "tp": "1", "ngpu": "1", "ctx": "8192", "gpu": "h200"})
    before = metric(at, "GPU KV cache size")
    at.number_input(key=key("gpu_memory_utilization")).set_value(0.06).run()  # weights alone exceed 6 %
    assert any("gpu_memory_utilization" in e.value for e in at.error)
    assert metric(at, "GPU KV cache size") == before
    at.text_area(key="engine_log_text").set_value("just some text\n").run()
    assert any("not a vLLM start-up log" in e.value for e in at.error)
