"""The cluster page's results, drawn from :func:`planner.cluster.page_view.cluster_record`: the two
deployments side by side, each pool's figures with their formulas, the role table with its
launch commands, and the Pareto chart of the layout sweep."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from planner.cluster.budget import BUDGET_LABELS, BUDGETS
from ui.layout import chart, metric_row
from units import format_number

__all__ = ["render_cluster", "budget_select", "pareto_figure", "role_frame", "MODE_STYLE"]

MODE_STYLE = {"aggregated": ("#1f77b4", "circle"), "disaggregated": ("#ff7f0e", "diamond")}
MODE_TITLES = {"disaggregated": "Disaggregated prefill/decode", "aggregated": "Aggregated (prefill and decode on one pool)"}


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:,.1f} ms"


def _gpus(record: dict[str, Any]) -> str:
    return "does not serve" if record["gpus"] is None else f"{record['gpus']:,}"


def budget_select(key: str) -> None:
    """The KV budget rule of every GPU (``--budget``): vLLM's memory profile, or the formula."""
    st.selectbox("KV budget per GPU", BUDGETS, key=key, format_func=BUDGET_LABELS.get,
                 help="vLLM's memory profile: the driver-reported memory × 0.9 (gpu_memory_utilization) − "
                      "weights − activation peak − non-torch − CUDA graphs, as the sizer's engine mode. "
                      "Reference formula: the vendor's GB × 0.9 − weights. Each pool's figures say which.")


def render_cluster(record: dict[str, Any]) -> None:
    """Both deployments, then the role tables, then the sweep (when the record has one)."""
    split, joint = record["disaggregated"], record["aggregated"]
    row = metric_row()
    for label, value, help_text in (
            ("GPUs, disaggregated", _gpus(split), "prefill and decode pools together"),
            ("GPUs, aggregated", _gpus(joint), "one pool serving prefill and decode"),
            ("TTFT, disaggregated", _ms(split["ttft_s"]), "prefill + KV transfer"
             + (", with the prompt queue" if split["ttft_includes_queueing"] else ", without queueing")),
            ("TPOT, disaggregated", _ms(split["tpot_s"]), "the decode pool's step"),
            ("TPOT, aggregated", _ms(joint["tpot_s"]), "the shared pool's step")):
        row.metric(label, value, help=help_text)
    for term in record["comparison"]:
        st.caption(term["text"])
    for mode, deployment in (("disaggregated", split), ("aggregated", joint)):
        st.subheader(MODE_TITLES[mode])
        verdict = ":material/check_circle:" if deployment["feasible"] else ":material/block:"
        st.markdown(f"{verdict} **{_gpus(deployment)} GPUs** — {deployment['explanation']}")
        for pool in deployment["pools"]:
            with st.expander(f"{pool['role'].capitalize()} pool: {pool['explanation']}"):
                st.dataframe(_terms_frame(pool["terms"]), hide_index=True, width="stretch")
        if deployment["terms"]:
            with st.expander("Transfer, staging and latency"):
                st.dataframe(_terms_frame(deployment["terms"]), hide_index=True, width="stretch")
        rows = record["roles"][mode]
        if rows:
            st.dataframe(role_frame(rows), hide_index=True, width="stretch")
            for row in rows:
                for label, command in (("vLLM", row["vllm"]), ("SGLang", row["sglang"])):
                    if command:
                        st.caption(f"{row['role'].capitalize()} · {label}")
                        st.code(command, language="bash", wrap_lines=True)
    if record.get("launch_note"):
        st.caption(record["launch_note"])
    if "pareto" in record:
        st.subheader("Every layout: throughput per GPU against latency")
        st.caption("Each point is one layout (TP × PP × DP, EP) at one batch, its replica fully loaded; "
                   "filled markers lie on the Pareto front, and the hover names the limit that binds it.")
        c1, c2 = st.columns(2)
        with c1:
            chart(pareto_figure(record["pareto"], "tpot_s", "on_front", "TPOT (ms)"), key="cluster_pareto_tpot",
                  file_name="cluster-pareto-tpot")
        with c2:
            chart(pareto_figure(record["pareto"], "ttft_s", "on_ttft_front", "TTFT (ms)"), key="cluster_pareto_ttft",
                  file_name="cluster-pareto-ttft")
        skipped = record["pareto"]["skipped"]
        if skipped:
            st.caption(f"{len(skipped):,} layouts left out (weights that do not fit, splits the engines refuse).")


def _terms_frame(terms: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame({"Figure": [t["name"] for t in terms], "How": [t["formula"] for t in terms],
                         "Value": [t["text"].rpartition(" = ")[2] for t in terms]})


def role_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The role table: role, layout, replicas, GPUs and nodes (the commands are shown below it)."""
    def layout(row: dict[str, Any]) -> str:
        lay = row["layout"]
        parts = [f"TP {lay['tp']}", f"PP {lay['pp']}", f"DP {lay['dp']}"] + (["EP"] if lay["ep"] else [])
        return " × ".join(parts)

    return pd.DataFrame({"Role": [r["role"] for r in rows], "Layout": [layout(r) for r in rows],
                         "Replicas": [format_number(r["replicas"]) for r in rows],
                         "GPUs": [format_number(r["gpus"]) for r in rows],
                         "Nodes": [format_number(r["nodes"]) for r in rows]})


def pareto_figure(pareto: dict[str, Any], x_key: str, front_key: str, x_title: str) -> go.Figure:
    """Tokens/s per GPU against ``x_key`` (seconds, shown in ms), one trace per mode and front."""
    fig = go.Figure()
    for mode, (color, symbol) in MODE_STYLE.items():
        for on_front in (False, True):
            points = [p for p in pareto["points"] if p["mode"] == mode and bool(p[front_key]) == on_front]
            if not points:
                continue
            fig.add_trace(go.Scatter(
                x=[p[x_key] * 1e3 for p in points], y=[p["tokens_per_s_per_gpu"] for p in points],
                mode="markers", name=f"{mode}{', Pareto front' if on_front else ''}",
                marker={"color": color, "symbol": symbol if on_front else f"{symbol}-open",
                        "size": 10 if on_front else 6},
                text=[_hover(p) for p in points], hovertemplate="%{text}<extra></extra>"))
    fig.update_layout(title={"text": f"Tokens/s per GPU against {x_title.split(' ')[0]}"},
                      xaxis={"title": {"text": x_title}, "type": "log"},
                      yaxis={"title": {"text": "output tokens/s per GPU"}},
                      legend={"orientation": "h", "y": -0.25}, margin={"t": 50})
    return fig


def _hover(point: dict[str, Any]) -> str:
    lay = point["layout"]
    text = (f"{point['mode']}: TP {lay['tp']} × PP {lay['pp']} × DP {lay['dp']}{' EP' if lay['ep'] else ''}, "
            f"batch {point['batch']:,}<br>TPOT {point['tpot_s'] * 1e3:,.2f} ms, TTFT {point['ttft_s'] * 1e3:,.0f} ms"
            f"<br>{point['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU; bound by {point['binding_limit']}")
    if point.get("prefill_limit"):
        text += f"<br>prefill sized by {point['prefill_limit']}"
    return text
