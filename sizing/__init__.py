"""KV-cache sizer: pure Python (no streamlit), imported by the sizer page and ``python -m sizing``.

API summary (all dataclasses frozen and keyword-only; bytes are ints unless noted; errors are
:class:`~sizing.errors.SizingError`, an :class:`~inputs.errors.InputError` and so a ``ValueError``,
with ``.field`` naming the input)::

    from sizing.report import SizingRequest, size_deployment
    report = size_deployment(SizingRequest(model="llama-3.1-70b", kv_dtype="fp8", weight_dtype="fp8",
                                           context=32_768, users=100, gpu="h100-sxm", tp=8))
    report.per_token_bytes, report.kv_bytes_total, report.weights_bytes, report.gpus_needed
    report.gpus.ratio / .count / .label ("15.9 → 16"), report.per_gpu_kv_bytes_per_token
    report.plan (DeploymentPlan: .best TPOption, .options, .gpus, .nodes, .summary)
    report.capacity (KvCapacity: blocks, tokens, max_concurrency), report.max_users, report.max_context
    report.steps (FormulaStep: label, expression, value, unit, value_bytes, note, .text)
    report.charts (ChartData: memory_vs_gpus MemoryChart; gpus_vs_context / gpus_vs_users CurveSeries)
    report.table (TableRow) / .table_records() / .table_csv(); report.without_gqa (GqaComparison)
    report.warnings (SizingWarning: code, field, message); report.handoff (Handoff); report.to_dict()

Modules, one job each:

* ``models``      ModelShape(layers, q_heads, kv_heads, head_dim, params, layer_kinds, state, ...), AttentionKind
* ``layers``      LayerKind, LayerGroup (per-GPU KV values or state per layer kind), RecurrentState
* ``config_layers`` layer kinds from a config's layer_types or its family's pattern
* ``layout_spec`` parse_layout("18 full + 18 sliding(128)" / "5 sliding(1024) : 1 full") for manual entry
* ``catalogue``   the shipped published configs (data/models/): catalogue(), get_entry(id), search_catalogue(text)
* ``presets``     PRESET_IDS, presets(), get_preset(id) -> ModelPreset (a catalogue entry), preset_shape(id)
* ``hub``         a Hub model id through huggingface_hub: resolve_model_id(id) (catalogue fallback)
* ``weights``     weight bytes by format (bf16, FP8, INT8, GPTQ/AWQ, MXFP4, NVFP4) from quantization_config
* ``hf_config``   parse_hf_config(bytes|str|dict, name=, params=) -> ModelShape; estimate_params(...) -> ParamEstimate
* ``precisions``  PRECISION_NAMES, get_precision(name, group_size=128) -> Precision (.bytes_per_value Fraction)
* ``kv``          KVCacheSpec(model, precision, tp, block_size); weights_bytes, usable_bytes, gpus_needed,
                  kv_capacity, max_users, max_context
* ``plan``        plan_deployment(...) -> DeploymentPlan (power-of-two TP, replicas, nodes of 8)
* ``request``     SizingRequest, resolve(request) -> Resolved (ids resolved, ranges checked)
* ``fields``      Bounds of the entered inputs (CONTEXT, USERS, N_GPUS, ...), manual_shape, config_params
* ``formula``     formula_steps -> FormulaStep; ``report_charts`` chart series and the reference table;
                  ``report_warnings`` SizingWarning
* ``report``      size_deployment(SizingRequest) -> SizingReport
* ``engine``      vLLM engine mode: memory profile, KV-cache groups, capacity, deployment, launch
                  commands, the start-up-log parser and explainer (``python -m sizing --engine vllm``,
                  ``python -m sizing explain-log``)

Below the sizer: ``hardware.gpus`` (GPU_IDS, get_gpu(id) -> GPU, custom_gpu(...)), whose errors
are plain :class:`inputs.errors.InputError`, and ``units`` (byte units, formatting, cdiv).
* ``cli``         ``python -m sizing`` (see ``--help``)

Nothing here does work at import time.
"""
