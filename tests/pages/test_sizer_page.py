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
    assert metric(at, "GPUs if pooled (lower bound)") == "16"
    # Without GQA (64 KV heads) BF16: 2.5 MiB per token, 8,000 GiB for 100 users.
    assert metric(at, "KV per token without GQA") == "2.5 MiB"
    steps = at.markdown[[i for i, md in enumerate(at.markdown) if "163,840" in md.value][0]].value
    assert "2 × 80 × 8 × 128" in steps


def test_kv_precision_and_units_change_the_numbers():
    at = run_page()
    at.selectbox(key=key("kv_dtype")).set_value("fp8").run()
    assert metric(at, "KV per token") == "160 KiB"
    assert metric(at, "KV, 100 users") == "500 GiB"
    # 500 GiB = 536.9 GB; + 70.6 GB weights = 607.5 GB over 72 GB usable: 8.4 → 9 H100s.
    assert metric(at, "GPUs if pooled (lower bound)") == "9"
    at.radio(key=key("units")).set_value("GB (decimal)").run()
    assert metric(at, "KV, 100 users") == "536.9 GB"
    at.selectbox(key=key("gpu")).set_value("h200").run()
    # 607.5 GB over 126.9 GB usable per H200: 4.8 → 5.
    assert metric(at, "GPUs if pooled (lower bound)") == "5"


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
    [("users", 0, "Users (concurrent)"), ("context", -5, "Context (tokens)"), ("n_gpus", 3, "GPUs deployed")],
)
def test_bad_numbers_are_named_and_kept(field, value, named):
    at = run_page()
    at.number_input(key=key(field)).set_value(value).run()
    assert not at.exception
    # Named by the widget's label, as the user sees it, not by the library's field.
    assert any(e.value.startswith(f"**{named}**") for e in at.error), [e.value for e in at.error]
    assert at.number_input(key=key(field)).value == value  # what was entered is not lost


def test_manual_shape_errors_name_the_field_and_keep_the_page_working():
    at = run_page()
    at.radio(key=key("model_source")).set_value("Manual").run()
    at.number_input(key=key("kv_heads")).set_value(7).run()  # 64 query heads do not split into 7 groups
    assert any(e.value.startswith("**KV heads**") for e in at.error)
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
    reference = [t.value for t in tables if "KV precision" in t.value.columns][0]
    h100_bf16 = reference[(reference["GPU"] == "H100 SXM") & (reference["KV precision"].str.contains("BF16"))]
    assert h100_bf16["GPUs needed"].iloc[0] == "16"
    assert h100_bf16["KV all users (GB)"].iloc[0] == "1,073.7"
    # Headers in words with units, no None cells (a TP-1 plan has no replication figure).
    for table in tables:
        assert not any("_" in column for column in table.value.columns), list(table.value.columns)
        assert "None" not in table.value.astype(str).to_numpy()


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
    assert metric(at, "GPUs if pooled (lower bound)") == "16"


def test_manual_defaults_survive_a_nan_parameter_count_link():
    at = run_page({"src": "Manual", "pb": "nan"})
    assert at.number_input(key=key("params_b")).value == pytest.approx(70.6)
    assert not at.error


@pytest.mark.parametrize(
    "query, control, named",
    [({"gpu": "custom"}, "custom_mem", "Memory (GB)"), ({"gpu": "custom"}, "custom_bw", "Bandwidth (TB/s)"),
     ({"src": "Manual"}, "params_b", "Parameters (billions)")],
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
    from ui.field_labels import widget_label

    at = run_page()
    at.selectbox(key=key("kv_dtype")).set_value("fp8").run()
    assert metric(at, "KV, 100 users") == "500 GiB"
    at.number_input(key=key(field)).set_value(value).run()
    assert any(widget_label(field) in e.value for e in at.error), [e.value for e in at.error]
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
    assert any("GPUs deployed" in e.value for e in at.error), [e.value for e in at.error]
    assert "last valid results" in texts(at.caption)
    assert metric(at, "GPUs if pooled (lower bound)") == "16"


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
    # The page's default FP8 weights: the published FP8 checkpoint, one GPU for the 100 users.
    assert any(c.startswith("vllm serve RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8 --tensor-parallel-size 1")
               for c in commands)
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


def test_engine_mode_recommends_one_deployment_and_says_which_count_is_which():
    at = run_page({"eng": "1", "model": "qwen2.5-7b", "tp": "1", "ngpu": "1", "ctx": "4096", "gpu": "l4",
                   "users": "50", "w": "bf16"})
    # TP 1 holds 16 requests per L4 (4 replicas = 4 GPUs); TP 2 holds 97 (one replica of 2 GPUs).
    assert metric(at, "GPUs to deploy") == "2 × L4" and metric(at, "Layout") == "TP 2 × 1 replica"
    assert metric(at, "Requests per replica").startswith("50 of ")
    commands = [c.value for c in at.code if not c.value.startswith("?")]  # not the page's own link
    assert commands[0].startswith("vllm serve Qwen/Qwen2.5-7B") and "--tensor-parallel-size 2" in commands[0]
    assert "--max-num-seqs 50" in commands[0] and len([c for c in commands if c.startswith("vllm serve")]) == 1
    assert any("counts memory as one pool" in c.value for c in at.caption)
    assert metric(at, "GPU KV cache size").endswith("tokens")  # the engine at TP 1, as asked
    assert any("TP 1, as asked: 16 requests per replica, 4 replicas = 4 GPUs" in i.value for i in at.info)


@pytest.mark.parametrize("utilization", [0.0, 1.5])
def test_absurd_utilization_is_named_and_kept(utilization):
    at = run_page({"eng": "1", "model": "llama-3.1-8b", "tp": "1", "ngpu": "1", "ctx": "8192", "gpu": "h200"})
    before = metric(at, "GPU KV cache size")
    at.number_input(key=key("gpu_memory_utilization")).set_value(utilization).run()
    assert not at.exception
    assert any("gpu_memory_utilization" in e.value for e in at.error)
    assert at.number_input(key=key("gpu_memory_utilization")).value == utilization  # what was typed stays
    assert metric(at, "GPU KV cache size") == before


def test_oversized_and_truncated_logs_are_refused_or_explained_and_kept():
    from sizing.engine.vllm_log import MAX_LOG_BYTES

    at = run_page({"eng": "1", "model": "llama-3.1-8b", "tp": "1", "ngpu": "1", "ctx": "8192", "gpu": "h200"})
    huge = "x" * (MAX_LOG_BYTES + 1)
    at.text_area(key="engine_log_text").set_value(huge).run()
    assert any(e.value.startswith("**vLLM start-up log**") and "limit" in e.value for e in at.error)
    truncated = "INFO [gpu_worker.py:276] Available KV cache memory: 1.40 GiB\nINFO [kv_cache_u"
    at.text_area(key="engine_log_text").set_value(truncated).run()
    assert not at.exception and not at.error
    assert at.text_area(key="engine_log_text").value == truncated
    assert any("Found: available_gib" in c.value for c in at.caption)


# ---- model sources: the searchable catalogue, Hub ids, manual layouts, the per-kind table ------
def kinds_table(at):
    """The by-layer-kind table as {kind label: row}."""
    table = next(d.value for d in at.dataframe if "Layer kind" in d.value.columns)
    return {row["Layer kind"]: row for row in table.to_dict("records")}, list(table.columns)


def test_layer_kind_table_has_readable_headers_and_the_reports_totals():
    at = run_page()
    rows, columns = kinds_table(at)
    assert all("_" not in c for c in columns) and "KV per token per GPU (TP 8)" in columns
    assert not any(v is None or v == "None" for row in rows.values() for v in row.values())
    # Llama-3.1-70B: 80 full layers × 2 × 8 KV heads × 128 × 2 B = 320 KiB; at TP 8 one KV head per GPU: 40 KiB.
    full = rows["Full attention"]
    assert (full["Layers"], full["KV per token"], full["KV per token per GPU (TP 8)"]) == ("80", "320 KiB", "40 KiB")
    assert full["State per sequence"] == "—" and full["One sequence at 32,768 tokens"] == "10 GiB"
    assert rows["All layers"]["KV per token"] == metric(at, "KV per token")


def test_catalogue_search_filters_and_picks_the_first_match():
    at = run_page()
    at.text_input(key=key("catalogue_search")).input("gemma 3 1b").run()
    box = at.selectbox(key=key("preset"))
    assert len(box.options) == 1 and "google/gemma-3-1b-it" in box.options[0] and box.value == "gemma-3-1b"
    assert at.query_params["model"] == "gemma-3-1b"
    rows, _ = kinds_table(at)
    # Gemma-3-1B: 1 KV head × 256 × 2 (K, V) × 2 B = 1 KiB per layer and token; every 6th layer
    # global: 4 full, 22 sliding over a 512-token window.
    assert (rows["Sliding window"]["Layers"], rows["Sliding window"]["Window / chunk (tokens)"]) == ("22", "512")
    assert (rows["Sliding window"]["KV per token"], rows["Full attention"]["KV per token"]) == ("22 KiB", "4 KiB")
    # At 32,768 tokens: 22 layers hold 512 tokens (11 MiB), 4 layers all 32,768 (128 MiB).
    assert rows["Sliding window"]["One sequence at 32,768 tokens"] == "11 MiB"
    assert rows["Full attention"]["One sequence at 32,768 tokens"] == "128 MiB"
    assert rows["All layers"]["One sequence at 32,768 tokens"] == metric(at, "Per user at 32,768") == "139 MiB"
    at.text_input(key=key("catalogue_search")).input("deepseek-ai").run()
    assert {o.split(" · ")[1].split("/")[0] for o in at.selectbox(key=key("preset")).options} == {"deepseek-ai"}


def test_catalogue_search_without_a_match_keeps_the_model():
    at = run_page()
    at.text_input(key=key("catalogue_search")).input("no such model").run()
    assert "No catalogue model matches" in texts(at.caption)
    assert at.selectbox(key=key("preset")).value == "llama-3.1-70b" and metric(at, "KV per token") == "320 KiB"


@pytest.mark.parametrize(("model_id", "per_token"), [
    ("mixtral-8x7b", "128 KiB"),  # a first-preset id: 2 × 32 × 8 × 128 × 2 B
    ("deepseek-v3", "68.6 KiB"),  # MLA: 61 × (512 + 64) × 2 B, no factor 2
])
def test_catalogue_ids_in_the_url(model_id, per_token):
    at = run_page({"model": model_id})
    assert at.selectbox(key=key("preset")).value == model_id and metric(at, "KV per token") == per_token


@pytest.fixture
def local_hub(monkeypatch, tmp_path):
    """A local Hub (HF_ENDPOINT): Qwen3-8B's config and index under a repo the catalogue lacks, a gated repo."""
    from sizing.catalogue import get_entry
    from support.hub_server import HubServer

    index = json.dumps({"metadata": {"total_size": 16_381_470_720}, "weight_map": {}}).encode()
    files = {("someorg/qwen3-8b-copy", "config.json"): get_entry("qwen3-8b").config_bytes,
             ("someorg/qwen3-8b-copy", "model.safetensors.index.json"): index}
    with HubServer(files, gated={"someorg/gated"}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
        yield server


def test_hub_model_id_through_the_client(local_hub):
    at = run_page({"src": "Hub", "hub": "someorg/qwen3-8b-copy", "w": "auto"})
    assert not at.error
    # Qwen3-8B: 2 × 36 × 8 × 128 × 2 B = 144 KiB per token; weights: the index's 16,381,470,720 B.
    assert metric(at, "KV per token") == "144 KiB" and metric(at, "Weights") == "15.3 GiB"
    assert "From the Hub" in texts(at.caption) and "16.4 GB" in texts(at.caption)
    assert any("config.json" in p for p in local_hub.requests)


def test_gated_hub_repo_is_named_and_the_last_model_kept(local_hub):
    at = run_page({"src": "Hub", "hub": "someorg/gated"})
    # The refusal names the widget the id was typed into, not the library's field.
    assert any(e.value.startswith("**Hugging Face model id**") and "gated" in e.value and "HF_TOKEN" in e.value
               for e in at.error)
    assert not any("model_id" in e.value for e in at.error)
    from sizing.presets import get_preset

    assert f"last good model, **{get_preset('llama-3.1-70b').name}**" in texts(at.caption)
    assert metric(at, "KV per token") == "320 KiB"
    assert at.text_input(key=key("hub_id")).value == "someorg/gated"  # what was typed is kept


def test_unreachable_hub_falls_back_to_the_catalogue_and_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1")  # nothing listens: refused at once
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    at = run_page({"src": "Hub", "hub": "Qwen/Qwen3-8B"})
    assert any("unreachable" in w.value and "Qwen3-8B" in w.value for w in at.warning)
    assert metric(at, "KV per token") == "144 KiB"
    assert at.session_state[handoff.SESSION_KEY].preset_id == "qwen3-8b"


@pytest.mark.parametrize(("query", "parameter"), [
    ({"src": "Hub", "hub": "../../etc/passwd"}, "hub"), ({"hub": "https://huggingface.co/a/b"}, "hub"),
    ({"src": "Manual", "lay": "12 foo"}, "lay"), ({"lay": "x" * 1000}, "lay"), ({"sdt": "fp64"}, "sdt"),
    ({"lora": "0"}, "lora"),
])
def test_hostile_model_link_parameters_show_a_notice(query, parameter):
    at = run_page(query)
    assert f"`{parameter}`" in texts(at.info), texts(at.info)


def test_manual_mixed_layout():
    at = run_page({"src": "Manual", "lay": "18 full + 18 sliding(128)", "layers": "36", "qh": "32", "hd": "128"})
    assert not at.error
    rows, _ = kinds_table(at)
    # 2 × 8 KV heads × 128 × 2 B = 4 KiB per layer and token; 18 layers of each kind.
    assert rows["Full attention"]["KV per token"] == rows["Sliding window"]["KV per token"] == "72 KiB"
    assert metric(at, "KV per token") == "144 KiB"
    # 18 layers × 4 KiB × 128 tokens = 9 MiB, whatever the context beyond 128.
    assert rows["Sliding window"]["One sequence at 32,768 tokens"] == "9 MiB"


def test_manual_layout_that_disagrees_with_the_layers_is_named_and_the_last_model_kept():
    at = run_page({"src": "Manual"})
    at.text_input(key=key("layout")).input("18 full + 18 sliding(128)").run()
    assert any("layout" in e.value and "lists 36 layers, but the model has 80" in e.value for e in at.error)
    assert "last good model, **Manual**" in texts(at.caption) and metric(at, "KV per token") == "320 KiB"
    at.number_input(key=key("layers")).set_value(36).run()
    assert not at.error and metric(at, "KV per token") == "144 KiB"  # 36 × 2 × 8 × 128 × 2 B


def test_manual_mamba_hybrid_holds_state_not_kv():
    at = run_page({"src": "Manual", "lay": "1 full : 3 mamba", "layers": "48"})
    assert not at.error
    rows, _ = kinds_table(at)
    mamba = rows["Mamba (SSM state)"]
    # Default Mamba2 sizes: conv 3 × (8,192 + 8 × 256) + SSM 128 × 8,192 = 1,079,296 values × 2 B
    # per layer; 36 layers = 77,709,312 B. No per-token KV.
    assert (mamba["Layers"], mamba["KV per token"], mamba["State per sequence"]) == ("36", "—", "74.1 MiB")
    assert rows["Full attention"]["KV per token"] == "48 KiB"  # 12 layers × 4 KiB
    at.number_input(key=key("state_heads")).set_value(0).run()
    assert any("heads" in e.value for e in at.error) and "last good model" in texts(at.caption)


def test_a_catalogue_id_in_the_hub_box_reads_the_shipped_copy(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1")  # no request may be needed
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    at = run_page({"src": "Hub", "hub": "mixtral-8x7b"})
    assert not at.error and not at.warning and "From the shipped catalogue" in texts(at.caption)
    assert metric(at, "KV per token") == "128 KiB"  # 2 × 32 × 8 × 128 × 2 B


def test_the_chart_tab_is_in_the_url_and_each_chart_marks_what_was_asked():
    at = run_page({"chart": "users", "users": "250", "model": "llama-3.1-8b", "gpu": "h200"})
    figures = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(figures) == 1  # only the open tab draws
    users = figures[0]
    here = [t for t in users["data"] if t["name"].startswith("you are here")]
    assert here and here[0]["x"] == [250, 250] and here[0]["name"] == "you are here: 250 users"
    # The title travels with a PNG export: what, model and GPU.
    assert users["layout"]["title"]["text"] == "GPUs vs users: Llama-3.1-8B on H200 SXM, 32,768 tokens each"
    at = run_page({"chart": "context", "ctx": "8192"})
    context = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert [t["x"] for t in context["data"] if t["name"].startswith("you are here")] == [[8192, 8192]]


# ---- the log explainer: the log's model against the page's, editable settings, refusals ------
ENGINE_QUERY = {"eng": "1", "model": "llama-3.1-8b", "tp": "1", "ngpu": "1", "ctx": "8192", "gpu": "h200"}


def test_log_explainer_names_the_logs_model_and_rebuilds_for_the_one_picked():
    at = run_page(ENGINE_QUERY)
    log = (ROOT / "tests" / "data" / "vllm_logs" / "forms" / "padded-qwen3-8b.log").read_text()
    at.text_area(key="engine_log_text").set_value(log).run()
    assert not at.exception and not at.error
    notice = next(w.value for w in at.warning if "the page's model is" in w.value)
    assert "Qwen/Qwen3-8B" in notice and "Llama-3.1-8B" in notice and "rebuilt for the page's model" in notice
    checks = next(d.value for d in at.dataframe if "figure" in d.value.columns)
    assert not checks["matches"][0]  # Llama-3.1-8B's 128 KiB a token gives 102,400 tokens, not 91,008
    assert any("do not match the log" in c.value for c in at.caption)
    at.radio(key="engine_log_model").set_value("qwen3-8b").run()
    checks = next(d.value for d in at.dataframe if "figure" in d.value.columns)
    assert checks["rebuilt"][0] == 91_008 and all(checks["matches"])


def test_log_explainer_lists_candidates_and_takes_an_edited_tp():
    at = run_page(ENGINE_QUERY)
    log = (ROOT / "tests" / "data" / "vllm_logs" / "qwen3-14b-lmcache.log").read_text()
    at.text_area(key="engine_log_text").set_value(log).run()
    info = next(i.value for i in at.info if "The log names no model" in i.value)
    assert "Qwen3-14B (TP 1, bf16)" in info and "the page's model is not among them" in info
    assert at.number_input(key="engine_log_tp").value == 1  # the page's TP: the log states none
    at.number_input(key="engine_log_tp").set_value(2).run()
    checks = next(d.value for d in at.dataframe if "figure" in d.value.columns)
    # Llama-3.1-8B at TP 2: 64 KiB a token, 1 MiB blocks: 6.51 GiB // 1 MiB × 16 tokens.
    assert checks["rebuilt"][0] == 6.51 * 2**30 // (16 * 65_536) * 16


def test_log_explainer_explains_a_refusal_and_ignores_absurd_figures():
    at = run_page(ENGINE_QUERY)
    refusal = (ROOT / "tests" / "data" / "vllm_logs" / "forms" / "refusal-wrapped-main.log").read_text()
    at.text_area(key="engine_log_text").set_value(refusal).run()
    fix = next(w.value for w in at.warning if "vLLM refused to start" in w.value)
    assert "--gpu-memory-utilization 0.63" in fix and "--max-model-len 976" in fix
    absurd = (ROOT / "tests" / "data" / "vllm_logs" / "forms" / "absurd-figures.log").read_text()
    at.text_area(key="engine_log_text").set_value(absurd).run()
    assert not at.exception and not at.error
    assert any("kv_tokens" in c.value and "not used" in c.value for c in at.caption)


@pytest.mark.parametrize(("page", "query"), [("1_sizer.py", {"users": "250", "kv": "fp8"}),
                                             ("4_planner.py", {"users": "40", "tp": "4"}),
                                             ("2_fragmentation.py", {"mean": "3000"})])
def test_every_page_offers_its_link_to_copy(page, query):
    at = open_page(page, query)
    links = [c.value for c in (at.code if page == "1_sizer.py" else at.sidebar.code) if "?" in c.value]
    assert len(links) == 1
    assert all(f"{name}={value}" in links[0] for name, value in query.items())


def _table_with(at, column: str):
    """The dataframe element that has ``column``, and its column settings (width, help)."""
    for element in at.dataframe:
        if column in element.value.columns:
            return element, json.loads(element.proto.columns or "{}")
    raise AssertionError(f"no table with {column!r}: {[list(e.value.columns) for e in at.dataframe]}")


def test_layouts_considered_say_dash_not_none_or_zero_and_show_the_whole_note():
    at = run_page({"eng": "1"})
    element, config = _table_with(at, "KV memory per GPU (GiB)")
    table = element.value
    assert list(table.columns) == ["TP", "PP", "Requests per replica", "Replicas", "GPUs",
                                   "KV memory per GPU (GiB)", "Note"]
    assert "None" not in table.astype(str).to_numpy()
    # TP 1 on an H100: 80 GB × 0.9 leaves ~1.5 GiB beside 65.8 GiB of weights, under the 10 GiB one
    # 32,768-token BF16 request needs (320 KiB × 32,768): no replica holds a request.
    tp1 = table[table["TP"] == "1"].iloc[0]
    assert (tp1["Requests per replica"], tp1["Replicas"], tp1["GPUs"]) == ("0", "—", "—")
    assert "one request of 32,768 tokens" in tp1["Note"]
    # The note is wider than the grid's 500 px auto width: its column is set to the whole text.
    assert config["Note"]["width"] >= 7.5 * len(tp1["Note"]) and "cannot hold" in config["GPUs"]["help"]


def test_engine_memory_terms_have_sentence_case_headers_and_words():
    at = run_page({"eng": "1"})
    table = _table_with(at, "Basis")[0].value
    assert list(table.columns) == ["Term", "GiB", "Estimated", "Basis"]
    assert set(table["Estimated"]) <= {"yes", "no"} and "no" in set(table["Estimated"])


def test_counts_and_shares_read_in_the_pages_one_format():
    at = run_page({"ngpu": "1024"})
    # 1,024 H100s deployed, with a separator like every other count; the TP plan's usable share
    # in the percent style of the tables and metrics ("90 %", not "90%").
    assert "On the 1,024 × H100 SXM deployed" in [h.value for h in at.subheader]
    assert any("Whole TP replicas by the reference formula: 90 % of the vendor's GB" in c.value for c in at.caption)


def strip_lines(at) -> list[str]:
    """The markdown of the answer strip (the ``sticky-answer`` container above the columns)."""
    blocks = [c for c in at.main.children.values() if str(getattr(c.proto, "id", "")).endswith("-sticky-answer")]
    assert len(blocks) == 1, "no answer strip above the columns"
    return [m.value for m in blocks[0].markdown]


def test_the_answer_strip_repeats_the_answer_and_follows_the_controls():
    at = run_page()
    # A TP-4 replica of the 70B holds 21 requests of 32,768 tokens: ⌈100 / 21⌉ = 5 replicas × 4
    # = 20 GPUs, ⌈100 / 5⌉ = 20 users each.
    assert metric(at, "GPUs to deploy") == "20 × H100 SXM"
    assert strip_lines(at) == [":material/task_alt: **20 × H100 SXM** · TP 4 × 5 replicas · "
                               ":green[100 users fit], 20 of 21 requests per replica"]
    at.number_input(key=key("users")).set_value(50).run()
    # ⌈50 / 21⌉ = 3 replicas × 4 = 12 GPUs, ⌈50 / 3⌉ = 17 users each.
    assert metric(at, "GPUs to deploy") == "12 × H100 SXM"
    assert strip_lines(at) == [":material/task_alt: **12 × H100 SXM** · TP 4 × 3 replicas · "
                               ":green[50 users fit], 17 of 21 requests per replica"]
    # A refused input: the strip, like the block, keeps the last valid answer and says so.
    at.number_input(key=key("users")).set_value(0).run()
    assert strip_lines(at)[0].startswith(":material/history: Last valid answer: **12 × H100 SXM** · ")


def test_the_answer_strip_says_when_nothing_fits():
    # 405B in BF16 on L4s at 0.3 utilization: no layout up to TP 8 × PP 16 holds one request.
    at = run_page({"model": "llama-3.1-405b", "w": "bf16", "gpu": "l4", "ctx": "131072", "users": "1",
                   "gmu": "0.3"})
    assert metric(at, "GPUs to deploy") == "none"
    assert strip_lines(at) == [":material/error: **none** · :red[No deployment on L4 up to TP 8 × PP 16 holds "
                               "one request of 131,072 tokens]"]
