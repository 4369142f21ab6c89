"""What the capacity planner's server tab shows for one :class:`~planner.plan.PlanOutcome`: the
bandwidth source, the headline metrics with the model that timed them, what limits each allocator
in words, why the throughput gain and the users gain differ, what a serving benchmark would print
at the paged batch, the chart, the table and the downloads. Drawing only: every figure comes from
the plan.
"""

from __future__ import annotations

import streamlit as st

from glossary import dtype_label
from inputs.uploads import dumps_strict
from planner.capacity import CapacityPlan
from planner.cli import result_dict
from planner.bench_like import error_band
from planner.plan import PlanOutcome
from ui.layout import chart, metric_row
from ui.planner_charts import ALLOCATOR_HELP, ALLOCATOR_PERCENT, allocator_rows, fmt_ms, server_figure
from ui.tables import counted, readable, show
from units import both, format_bytes, format_number

# The planner's step model multiplies FLOPs by the GPU's BF16 tensor-core rate for every weight
# format; FP8 and integer weights read fewer bytes but their faster matmul rates are not modelled.
BF16_RATE_ONLY = ("fp8", "int8", "int4", "int2")


def gain_words(plan: CapacityPlan) -> str | None:
    """Why paging serves many more users than tokens/s, when it does; None otherwise."""
    paged, contiguous, gain = plan.paged, plan.contiguous, plan.paged_gain
    if gain is None or contiguous.users_per_gpu <= 0 or paged.step is None or contiguous.step is None:
        return None
    users = paged.users_per_gpu / contiguous.users_per_gpu
    if users < 1.2 * gain:
        return None
    # What would put the two at equal latency depends on what caps each batch now.
    if plan.tpot_target_s is None:
        compare = "Set a TPOT target to compare the two at equal latency, as the paper's 2–4× does."
    elif paged.latency_batch < paged.memory_batch:
        compare = (f"The {fmt_ms(plan.tpot_target_s)} target caps only the paged batch here; contiguous "
                   "allocation runs out of memory first, so the two are not at equal latency.")
    else:
        compare = (f"The {fmt_ms(plan.tpot_target_s)} target is looser than both steps, so each runs its whole "
                   "memory batch; a tighter target compares them nearer equal latency.")
    return (f"**Why {users:,.1f}× the users but {gain:.2f}× the tokens/s:** each decode step reads every "
            f"running sequence's KV cache, so paging's batch of {paged.batch:,} (against {contiguous.batch:,}) "
            f"makes each step longer: {fmt_ms(paged.step.step_s)} per output token paged, "
            f"{fmt_ms(contiguous.step.step_s)} contiguous. Throughput is batch ÷ step time, and once the KV reads "
            "fill the step it stays at the bandwidth's limit: paging's gain here is more users at a slower "
            f"TPOT. {compare}")


def render_server(outcome: PlanOutcome, *, source_label: str, weight_dtype: str) -> None:
    """The server tab for ``outcome``."""
    plan = outcome.plan
    paged, contiguous = plan.paged, plan.contiguous
    skipped = " Skipped: " + "; ".join(outcome.source_notes) + "." if outcome.source_notes else ""
    st.info(f"**Bandwidth source: {source_label}.** {outcome.estimate.label}.{skipped}", icon=":material/info:")
    row = metric_row()
    # Users are whole sequences: a replica's count, its share per GPU only in the help.
    row.metric("Users per replica, paged", f"{paged.batch:,}",
               help=f"Concurrent sequences one TP-{paged.tp} replica runs at the operating point "
                    f"({format_number(paged.users_per_gpu, 1)} per GPU on average)")
    row.metric("Users per replica, contiguous", f"{contiguous.batch:,}",
               help=f"{format_number(contiguous.users_per_gpu, 1)} per GPU on average")
    row.metric("Tokens/s per GPU, paged", format_number(paged.tokens_per_s_per_gpu, 0))
    row.metric("Paging's throughput gain", "—" if plan.paged_gain is None else f"{plan.paged_gain:.2f}×",
               help="Paged tokens/s ÷ contiguous tokens/s, each at its own operating batch.")
    budget = max(plan.kv_budget_bytes_per_gpu, 0)
    row = metric_row()
    row.metric("Users per node, paged", format_number(paged.users_per_node, 0))
    row.metric("TPOT at the paged batch", fmt_ms(None if paged.step is None else paged.step.step_s),
               help=f"One decode step of the paged batch, every sequence at the mean length: {plan.timing_label}.")
    row.metric("Time to first token", fmt_ms(plan.ttft_s),
               help=f"The mean prompt prefilled alone: {plan.timing_label}.")
    row.metric("KV budget per GPU", format_bytes(budget, largest="GiB"), help=both(budget))
    note = f" {outcome.timing_note[:1].upper()}{outcome.timing_note[1:]}." if outcome.timing_note else ""
    st.caption(f":material/timer: TPOT and TTFT timed by the {plan.timing_label}.{note}")

    st.markdown(f"**What limits paging:** {paged.explanation}")
    st.markdown(f"**What limits contiguous allocation:** {contiguous.explanation}")
    if (words := gain_words(plan)) is not None:
        st.markdown(words)
    st.markdown(f"**The paper's 2–4×:** {plan.paper_check()}")
    if plan.ttft_target_s is not None and plan.ttft_s > plan.ttft_target_s:
        st.warning(f"TTFT: prefill of the mean prompt takes {fmt_ms(plan.ttft_s)}, over the "
                   f"{fmt_ms(plan.ttft_target_s)} target.", icon=":material/warning:")
    render_serving(outcome)
    if plan.gpus_needed is not None:
        st.markdown(f"**Arrival rate {plan.arrival_rate_per_s:g}/s** needs "
                    f"{plan.required_concurrency:,.0f} sequences in flight (Little's law): "
                    f"{counted(plan.replicas_needed, 'paged replica')} = {counted(plan.gpus_needed, 'GPU')}.")
    if outcome.fits.clipped:
        st.caption(f"{counted(outcome.fits.clipped, 'request was', 'requests were')} cut to the maximum context.")
    chart(server_figure(plan), key="planner.chart", file_name="throughput_and_tpot")
    show(readable(allocator_rows(plan), percent=ALLOCATOR_PERCENT), key="planner.table", file_name="capacity_plan.csv",
         help=ALLOCATOR_HELP)
    st.download_button("Plan as JSON (as `python -m planner --json`)", key="planner.json",
                       data=dumps_strict(result_dict(outcome, batch=None, context=None), indent=2).encode(),
                       file_name="capacity_plan.json", mime="application/json", icon=":material/download:")
    if plan.timing_model == "step model":
        compute = ("Decode step = the step model's kernels one after another (weight GEMMs at their format, "
                   "attention by layer kind, all-reduces, launches, sampling; `planner/step_model.py`); the "
                   "bound in the table is the roofline's reading of the same bytes and FLOPs.")
    else:
        compute = ("Decode step = max(bytes read ÷ bandwidth, FLOPs ÷ the BF16 matmul rate)." +
                   (f" {dtype_label(weight_dtype)} weights are read at their own size, but their matmuls are costed "
                    "at the BF16 rate (faster low-precision tensor-core rates are not modelled), so a "
                    "compute-bound step here is an upper bound." if weight_dtype in BF16_RATE_ONLY else ""))
    st.caption(f"Traffic: {outcome.traffic_label}; mean {plan.context:,.0f} tokens per request, counted at full "
               f"length (so the step time is an upper bound). {compute}")


def render_serving(outcome: PlanOutcome) -> None:
    """What a serving benchmark (``vllm bench serve``) would print at the paged batch, from the
    same step model; nothing for a plan the roofline timed."""
    serving, spec = outcome.serving, outcome.serving_spec
    if serving is None or spec is None:
        return
    st.markdown(f"**A serving benchmark at the paged batch** ({spec.concurrency:,} requests in flight, "
                f"{spec.input_len:,.0f} prompt and {spec.output_len:,.0f} output tokens each, "
                f"{serving.arrival} arrivals):")
    row = metric_row()
    for label, mean, p90 in (("Mean TPOT", serving.tpot_s, serving.p90_tpot_s),
                             ("Mean TTFT", serving.ttft_s, serving.p90_ttft_s),
                             ("Mean ITL", serving.itl_s, serving.p90_itl_s)):
        row.metric(f"{label} (serving)", fmt_ms(mean), help=None if p90 is None else f"P90 {fmt_ms(p90)}")
    row.metric("Output tokens/s (serving)", format_number(serving.output_tokens_per_s, 0))
    p90 = ("" if serving.p90_tpot_s is None else
           f" P90: TPOT {fmt_ms(serving.p90_tpot_s)}, TTFT {fmt_ms(serving.p90_ttft_s)}, "
           f"ITL {fmt_ms(serving.p90_itl_s)}.")
    notes = "".join(f" Note: {n}." for n in outcome.serving_notes)
    st.caption("Prompts share the steps here (chunked prefill) and each context counts at its mean over a "
               "request's life, where the plan's TPOT is a decode-only step at full length; hence the two "
               f"differ.{p90}{notes} {error_band()}.")
