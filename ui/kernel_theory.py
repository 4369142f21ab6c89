"""The reference page's traffic model beside a measurement, in words and tables (no streamlit).

"The reference page" is the course page this app is built from, *KV cache, PagedAttention and
FlashAttention* (:data:`REFERENCE_PAGE`): decode reads the KV cache once and is bound by HBM
bandwidth; prefill is bound by the tensor cores once it is tiled. The notes here say, for the
shape on screen, whether a launch and not the memory sets its time, and why a share of the
measured ceiling can pass 100 %.
"""

from __future__ import annotations

import pandas as pd

from kernels.bench.records import Ceilings, DecodeResult, Measurement, MixedResult, PrefillResult
from kernels.theory import Hardware, decode_model, prefill_model
from ui.kernel_tables import contender_name

__all__ = ["REFERENCE_PAGE", "DTYPE_BYTES", "GIB", "hardware_from_ceilings", "theory_frame", "launch_bound_note",
           "ceiling_note", "LAUNCH_BOUND_FACTOR"]

REFERENCE_PAGE = "the course page *KV cache, PagedAttention and FlashAttention*"
DTYPE_BYTES = {"bf16": 2, "fp16": 2}
GIB = 2**30
# A call taking more than this many times the time its KV bytes need at the ceiling is called
# launch-bound: the fixed cost of the launches, not the reads, makes most of it.
LAUNCH_BOUND_FACTOR = 2.0


def hardware_from_ceilings(ceilings: Ceilings, *, measured: bool) -> Hardware | None:
    """The measured ceilings (None if not measured) or the datasheet's, as a ``Hardware``.

    The copy figure counts read + write bytes, which is the streaming bandwidth a kernel that
    reads one stream and writes another sees; it is used as the HBM bandwidth as it stands.
    """
    if measured:
        if ceilings.copy_tbps is None or ceilings.matmul_tflops is None:
            return None
        return Hardware(name="measured in this run", hbm_tbps=ceilings.copy_tbps, tflops=ceilings.matmul_tflops)
    return Hardware(name="datasheet", hbm_tbps=ceilings.datasheet_tbps, tflops=ceilings.datasheet_tflops)



def theory_frame(result: DecodeResult | PrefillResult | MixedResult, ceilings: Ceilings) -> pd.DataFrame:
    """The reference page's traffic model for this shape beside the measured times (µs)."""
    rows = []
    for measured in (True, False):
        hw = hardware_from_ceilings(ceilings, measured=measured)
        if hw is None:
            continue
        if isinstance(result, MixedResult):
            s = result.shape
            memory_s, compute_s = hw.seconds_to_move(result.hbm_bytes), hw.seconds_to_compute(result.flops)
            rows += [
                {"quantity": f"batch: sequences / query tokens / decode rows ({hw.name})",
                 "model": f"{len(s.q_lens)} / {sum(s.q_lens):,} / {s.n_decode}"},
                {"quantity": f"FLOPs of the visible (query, key) pairs / least HBM bytes ({hw.name})",
                 "model": f"{result.flops / 1e12:,.3f} TFLOP / {result.hbm_bytes / 1e9:,.3f} GB "
                          f"({result.flops / result.hbm_bytes:,.0f} FLOP/B)"},
                {"quantity": f"memory-bound / compute-bound time ({hw.name})",
                 "model": f"{memory_s * 1e6:,.1f} µs / {compute_s * 1e6:,.1f} µs → "
                          f"{'memory' if memory_s > compute_s else 'compute'}-bound"},
            ]
        elif isinstance(result, PrefillResult):
            s = result.shape
            model = prefill_model(seq_len=s.seq_len, head_dim=s.head_dim, n_heads=s.n_q_heads, batch=s.batch,
                                  bytes_per_value=DTYPE_BYTES.get(s.dtype, 2), hardware=hw, causal=s.causal)
            rows += [
                {"quantity": f"N×N matrix per head / whole shape ({hw.name})",
                 "model": f"{model.matrix_bytes_per_head / 2**20:,.1f} MiB / {model.matrix_bytes_layer / GIB:,.2f} GiB"},
                {"quantity": f"HBM traffic standard / tiled ({hw.name})",
                 "model": f"{model.standard_traffic_layer / 1e9:,.3f} GB / {model.tiled_traffic_layer / 1e9:,.4f} GB"
                          f" ({model.traffic_ratio:.0f}× less)"},
                {"quantity": f"standard: memory-bound / compute-bound time ({hw.name})",
                 "model": f"{model.standard_memory_s * 1e6:,.1f} µs / {model.compute_s * 1e6:,.1f} µs "
                          f"→ {model.standard_bound}-bound"},
                {"quantity": f"tiled: memory-bound / compute-bound time ({hw.name})",
                 "model": f"{model.tiled_memory_s * 1e6:,.2f} µs / {model.compute_s * 1e6:,.1f} µs "
                          f"→ {model.tiled_bound}-bound"},
            ]
        else:
            s = result.shape
            model = decode_model(batch=s.batch, context=s.context, n_q_heads=s.n_q_heads, n_kv_heads=s.n_kv_heads,
                                 head_dim=s.head_dim, bytes_per_value=DTYPE_BYTES.get(s.dtype, 2), hardware=hw)
            rows.append({"quantity": f"KV bytes ÷ bandwidth ({hw.name})",
                         "model": f"{model.kv_bytes / 1e9:,.3f} GB ÷ {hw.hbm_tbps:.2f} TB/s = "
                                  f"{model.memory_s * 1e6:,.1f} µs ({model.intensity:.0f} FLOP/B)"})
    for m in result.measurements:
        if m.status == "ok" and m.median_ms:
            rows.append({"quantity": f"measured: {contender_name(m.contender)}", "model": f"{m.median_ms * 1e3:,.1f} µs"})
    frame = pd.DataFrame(rows, columns=["quantity", "model"])
    return frame.rename(columns={"quantity": "Quantity", "model": "Model or measurement"})


def _bandwidth(ceilings: Ceilings) -> tuple[float, str]:
    """The HBM figure a read is compared with: the run's copy if measured, else the datasheet's."""
    if ceilings.copy_tbps:
        return ceilings.copy_tbps, "the copy bandwidth measured in the same run"
    return ceilings.datasheet_tbps, "the datasheet bandwidth"


def launch_bound_note(result: DecodeResult | PrefillResult | MixedResult, ceilings: Ceilings) -> str | None:
    """For a decode shape whose kernel time is over :data:`LAUNCH_BOUND_FACTOR` times its reading
    time, one sentence saying so in its own numbers; None otherwise."""
    if not isinstance(result, DecodeResult):
        return None
    m = result.get("triton_paged")
    if m is None or m.status != "ok" or not m.median_ms:
        return None
    tbps, which = _bandwidth(ceilings)
    read_us = result.kv_bytes / (tbps * 1e12) * 1e6
    took_us = m.median_ms * 1e3
    if took_us <= LAUNCH_BOUND_FACTOR * read_us:
        return None
    return (f"**This shape is launch-bound.** Its {result.kv_bytes / 1e6:,.1f} MB of KV take {read_us:,.1f} µs to "
            f"read at {tbps:.2f} TB/s ({which}), but the call takes {took_us:,.1f} µs: launching the split "
            f"kernel and its merge, and filling {result.num_splits} split(s) × {result.shape.batch} sequence(s) × "
            f"{result.shape.n_kv_heads} KV heads of programs, costs a fixed few µs that does not shrink with "
            f"the shape, so small shapes measure the launches rather than the memory.")


def ceiling_note(m: Measurement, ceilings: Ceilings) -> str | None:
    """Why a share of the measured ceiling above 100 % is possible (None at or below 100 %)."""
    if m.share_of_measured is None or m.share_of_measured <= 1.0 or ceilings.copy_tbps is None:
        return None
    sheet = "" if m.share_of_datasheet is None else f" ({100 * m.share_of_datasheet:.0f} % of it here)"
    return (f"**Over 100 % of the measured ceiling** is possible: that ceiling is a device-to-device copy "
            f"({ceilings.copy_tbps:.2f} TB/s counting its reads and its writes), and a kernel that only reads "
            f"keeps HBM streaming in one direction, which goes faster than a copy's mix of reads and writes. "
            f"The hard limit is the datasheet's {ceilings.datasheet_tbps} TB/s{sheet}.")
