"""The widget label each library field is typed into, so a refusal on a page names what the
user sees ("Context (tokens)"), not the library's field ("context"). The CLIs keep their own map
to option names; a field without a widget here (a config.json key, say) is shown as it is."""

from __future__ import annotations

from collections.abc import Mapping

from inputs.errors import InputError

__all__ = ["WIDGET_LABELS", "PLANNER_LABELS", "CLUSTER_LABELS", "widget_label", "page_message"]

WIDGET_LABELS: dict[str, str] = {
    "model_id": "Hugging Face model id", "model_source": "Hugging Face model id", "model": "Model",
    "config": "config.json", "layers": "Layers", "q_heads": "Query heads", "kv_heads": "KV heads",
    "head_dim": "Head dim", "params": "Parameters (billions)", "sliding_window": "Sliding window (0 = none)",
    "kv_lora_rank": "MLA latent (kv_lora_rank)", "qk_rope_head_dim": "RoPE key (qk_rope_head_dim)",
    "state_per_head": "State values per head", "conv_channels": "Conv channels", "conv_kernel": "Conv kernel",
    "group_channels": "Channels per group", "groups": "B/C groups (0 = none)",
    "kv_dtype": "KV precision", "weight_dtype": "Weight precision",
    "kv_dtype_group_size": "Scale group size (values)", "weight_dtype_group_size": "Scale group size (values)",
    "group_size": "Scale group size (values)",
    "context": "Context (tokens)", "users": "Users (concurrent)", "gpu": "GPU",
    "usable_fraction": "Usable fraction of memory", "usable": "Usable fraction of memory",
    "tp": "Tensor parallel (TP)", "n_gpus": "GPUs deployed", "gpus": "GPUs deployed",
    "block_size": "Block size (tokens)", "gpu_memory_gb": "Memory (GB)", "gpu_bandwidth_tbs": "Bandwidth (TB/s)",
    "gpu_memory_utilization": "gpu_memory_utilization", "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens", "kv_budget_gib": "KV budget per GPU (GiB, 0 = estimate)",
    "log": "vLLM start-up log",
}


# The planner page labels some of the same fields otherwise.
PLANNER_LABELS: dict[str, str] = {
    **WIDGET_LABELS, "users": "Users (concurrent, for the answer)", "max_context": "Maximum context (tokens)",
    "context": "Maximum context (tokens)", "tp": "Tensor parallelism (GPUs per replica)",
    "block_size": "Paged block size (tokens)", "usable_fraction": "Usable share of GPU memory",
    "usable": "Usable share of GPU memory", "tpot_ms": "TPOT target (ms, 0: none)",
    "ttft_ms": "TTFT target (ms, 0: none)", "rate": "Arrival rate (requests/s, 0: none)",
    "mean": "Mean tokens per request", "sigma": "Sigma (log-space spread)", "efficiency": "Bandwidth efficiency",
    "trace": "Trace", "tokens_per_frame": "Camera tokens per frame (all cameras)",
    "frames_per_s": "Frames per second", "instruction_tokens": "Instruction tokens",
}


# The cluster page's load and layout widgets (a layout refusal names its role: decode_ep).
CLUSTER_LABELS: dict[str, str] = {
    **WIDGET_LABELS, "rate": "Arrival rate (requests/s)", "prompt_tokens": "Prompt tokens",
    "output_tokens": "Output tokens", "tpot_ms": "TPOT target (ms, 0: none)", "ttft_ms": "TTFT target (ms, 0: none)",
    "nics": "NICs per GPU", "link": "Link", "connector": "KV connector", "budget": "KV budget per GPU",
    # The page has no utilisation control: a budget the engine's runtime terms use up is the budget rule's.
    "usable_fraction": "KV budget per GPU",
    **{f"{role}_{part}": f"{title}: {label}" for role, title in (("prefill", "Prefill pool"), ("decode", "Decode pool"))
       for part, label in (("tp", "TP"), ("pp", "PP"), ("dp", "DP"), ("ep", "Expert parallel (EP)"),
                           ("dcp", "decode context parallel"), ("pp_layer_partition", "PP"))},
}


def widget_label(field: str, labels: Mapping[str, str] = WIDGET_LABELS) -> str:
    """The label of the widget that sets ``field``, or the field itself when no widget does."""
    return labels.get(field, field)


def page_message(exc: InputError, labels: Mapping[str, str] = WIDGET_LABELS) -> str:
    """The refusal as a page shows it, in Markdown, led by the widget's label in bold: a bound's
    ``must be ...`` reads as a sentence (``**Context (tokens)** must be ...``), anything else
    after a colon."""
    label = widget_label(exc.field, labels)
    if exc.message.startswith(("must ", "is ")):
        return f"**{label}** {exc.message}"
    return f"**{label}**: {exc.message}"
