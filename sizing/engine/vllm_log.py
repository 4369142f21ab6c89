"""Parse a pasted vLLM start-up log: the lines that size the KV cache, wherever they appear.

Recognised (V1 from v0.8 on, plus the V0 formats users still paste): the engine config line
(model, tensor_parallel_size, dtype, kv_cache_dtype, max_seq_len), ``non-default args``,
"Chunked prefill is enabled with max_num_batched_tokens=N", "Model loading took X GiB" /
"Loading model weights took X GB", the memory-profiling breakdown (both the one-line and the
table form), "Available KV cache memory: X GiB", "GPU KV cache size: N tokens", "# GPU blocks: N",
"Maximum concurrency for L tokens per request: C x", "Add N padding layers, may waste at most
P% KV cache memory", CUDA-graph estimates and captures, and the "To serve at least one request"
error with vLLM's estimated maximum model length.

Input is text already read under a size cap (:data:`MAX_LOG_BYTES`); lines longer than
:data:`_MAX_LINE_CHARS` are cut before matching, so no line costs more than a bounded regex scan.
The first occurrence of each figure wins, except that a line tagged as worker rank 0
(``(VllmWorker rank=0 …)``, ``(Worker_TP0 …)``) replaces a figure first read from another rank:
workers print in any order, and under pipeline parallelism each stage prints its own figures, of
which rank 0's (stage 0) are the ones reconstructed. Every rank's "Available KV cache memory" is
kept in :attr:`ParsedLog.available_by_rank`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields

from inputs.errors import InputError
from inputs.uploads import decode_text

MAX_LOG_BYTES = 8 * 2**20  # a full start-up log is well under 1 MB; 8 MB leaves room for chatty ones
_MAX_LINE_CHARS = 8_000  # the engine-config line is the longest (~4 KB)
_NUMBER = r"(-?[\d,]*\.?\d+)"


@dataclass(frozen=True, kw_only=True)
class FoundLine:
    """Where a figure was read: the field, its 1-based line number and the line (clipped)."""

    field: str
    line_no: int
    text: str


@dataclass(frozen=True, kw_only=True)
class ParsedLog:
    """The figures a start-up log states; None where it does not state them.

    GiB figures are as printed (rounded to 0.01 or 0.0001 GiB); ``weights_unit`` says whether
    the weights line used GiB or vLLM's older "GB" (which was also 2**30 bytes).
    """

    version: str | None = None
    model: str | None = None
    tp: int | None = None
    pp: int | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    max_model_len: int | None = None
    block_size: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    gpu_memory_utilization: float | None = None
    weights_gib: float | None = None
    total_gib: float | None = None
    requested_gib: float | None = None
    non_torch_gib: float | None = None
    activation_gib: float | None = None
    cuda_graph_gib: float | None = None
    available_gib: float | None = None
    kv_tokens: int | None = None
    gpu_blocks: int | None = None
    concurrency: float | None = None
    concurrency_len: int | None = None
    padding_layers: int | None = None
    padding_waste_percent: float | None = None
    needed_gib: float | None = None
    estimated_max_len: int | None = None
    available_by_rank: tuple[tuple[int, float], ...] = field(default=())  # (rank, GiB) of tagged lines
    found: tuple[FoundLine, ...] = field(default=())

    @property
    def found_fields(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f.field for f in self.found))

    @property
    def missing_fields(self) -> tuple[str, ...]:
        """The figures this log does not state (besides the bookkeeping ones)."""
        present = set(self.found_fields)
        return tuple(f.name for f in fields(self)
                     if f.name not in ("found", "available_by_rank") and f.name not in present)

    def as_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "found"}
        out["found_lines"] = [{"field": f.field, "line": f.line_no, "text": f.text} for f in self.found]
        return out


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _int(text: str) -> int:
    return int(text.replace(",", ""))


# (marker that must appear in the line, pattern, {group name: (field, converter)})
_RULES: tuple[tuple[str, re.Pattern[str], dict[str, tuple[str, object]]], ...] = tuple(
    (marker, re.compile(pattern), groups) for marker, pattern, groups in (
        ("LLM engine (v", r"LLM engine \(v([^)\s]+)\)", {"1": ("version", str)}),
        ("█  version ", r"█  version (\d+\.\d+[\w.+-]*)", {"1": ("version", str)}),
        ("with config:", r"with config: model='([^']*)'", {"1": ("model", str)}),
        ("tensor_parallel_size=", r"tensor_parallel_size=(\d+)", {"1": ("tp", int)}),
        ("'tensor_parallel_size':", r"'tensor_parallel_size': (\d+)", {"1": ("tp", int)}),
        ("pipeline_parallel_size=", r"pipeline_parallel_size=(\d+)", {"1": ("pp", int)}),
        ("'pipeline_parallel_size':", r"'pipeline_parallel_size': (\d+)", {"1": ("pp", int)}),
        ("dtype=torch.", r"[^_]dtype=torch\.(\w+)", {"1": ("dtype", str)}),
        ("kv_cache_dtype=", r"kv_cache_dtype=(\w+)", {"1": ("kv_cache_dtype", str)}),
        ("'kv_cache_dtype':", r"'kv_cache_dtype': '(\w+)'", {"1": ("kv_cache_dtype", str)}),
        ("max_seq_len=", r"max_seq_len=(\d+)", {"1": ("max_model_len", int)}),
        ("Using max model len", r"Using max model len (\d+)", {"1": ("max_model_len", int)}),
        ("'max_model_len':", r"'max_model_len': (\d+)", {"1": ("max_model_len", int)}),
        ("'block_size':", r"'block_size': (\d+)", {"1": ("block_size", int)}),
        ("max_num_batched_tokens=", r"max_num_batched_tokens=(\d+)", {"1": ("max_num_batched_tokens", int)}),
        ("'max_num_batched_tokens':", r"'max_num_batched_tokens': (\d+)", {"1": ("max_num_batched_tokens", int)}),
        ("'max_num_seqs':", r"'max_num_seqs': (\d+)", {"1": ("max_num_seqs", int)}),
        ("'gpu_memory_utilization':", r"'gpu_memory_utilization': ([\d.]+)", {"1": ("gpu_memory_utilization", float)}),
        ("'model':", r"'model': '([^']*)'", {"1": ("model", str)}),
        ("loading took", r"[Mm]odel loading took " + _NUMBER + r" ?Gi?B", {"1": ("weights_gib", _num)}),
        ("weights took", r"Loading model weights took " + _NUMBER + r" ?Gi?B", {"1": ("weights_gib", _num)}),
        ("weights take", r"weights take " + _NUMBER + r" ?GiB", {"1": ("weights_gib", _num)}),
        ("total_gpu_memory", r"total_gpu_memory\s*\(?\s*" + _NUMBER + r" ?GiB\)?", {"1": ("total_gib", _num)}),
        ("gpu_memory_utilization (", r"gpu_memory_utilization \(([\d.]+)\) = " + _NUMBER,
         {"1": ("gpu_memory_utilization", float), "2": ("requested_gib", _num)}),
        ("gpu_memory_utilization ", r"gpu_memory_utilization\s+([\d.]+)\s*$", {"1": ("gpu_memory_utilization", float)}),
        ("can use", r"the current vLLM instance can use\s+" + _NUMBER + r" ?GiB", {"1": ("requested_gib", _num)}),
        ("model weights take", r"model weights take\s+" + _NUMBER + r" ?GiB", {"1": ("weights_gib", _num)}),
        ("non_torch_memory", r"non_torch_memory(?: takes)?\s+" + _NUMBER + r" ?GiB", {"1": ("non_torch_gib", _num)}),
        ("activation peak memory", r"activation peak memory(?: takes)?\s+" + _NUMBER + r" ?GiB",
         {"1": ("activation_gib", _num)}),
        ("for peak activation", r"Actual usage is " + _NUMBER + r" GiB for weight, " + _NUMBER
         + r" GiB for peak activation, " + _NUMBER + r" GiB for non-torch memory, and " + _NUMBER
         + r" GiB for CUDAGraph", {"1": ("weights_gib", _num), "2": ("activation_gib", _num),
                                   "3": ("non_torch_gib", _num), "4": ("cuda_graph_gib", _num)}),
        ("Estimated CUDA graph memory", r"Estimated CUDA graph memory: " + _NUMBER + r" GiB",
         {"1": ("cuda_graph_gib", _num)}),
        ("Graph capturing finished", r"Graph capturing finished in \d+ secs?, took " + _NUMBER + r" GiB",
         {"1": ("cuda_graph_gib", _num)}),
        ("Available KV cache memory", r"Available KV cache memory: " + _NUMBER + r" GiB", {"1": ("available_gib", _num)}),
        ("reserved for KV Cache", r"reserved for KV Cache is " + _NUMBER + r" ?GiB", {"1": ("available_gib", _num)}),
        ("available_kv_cache_memory", r"available_kv_cache_memory\s+" + _NUMBER + r" ?GiB",
         {"1": ("available_gib", _num)}),
        ("GPU KV cache size", r"GPU KV cache size: " + _NUMBER + r" tokens", {"1": ("kv_tokens", _int)}),
        ("blocks:", r"(?:GPU|CUDA) blocks: (\d+)", {"1": ("gpu_blocks", int)}),
        ("kv_cache_size=", r"kv_cache_size=" + _NUMBER + r"GiB", {"1": ("available_gib", _num)}),
        ("Maximum concurrency for", r"Maximum concurrency for " + _NUMBER + r" tokens per request: " + _NUMBER + r"x",
         {"1": ("concurrency_len", _int), "2": ("concurrency", _num)}),
        ("padding layers", r"Add (\d+) padding layers, may waste at most " + _NUMBER + r"%",
         {"1": ("padding_layers", int), "2": ("padding_waste_percent", _num)}),
        ("KV cache is needed", r"max seq len \((\d+)\), \(" + _NUMBER + r" GiB KV cache is needed",
         {"1": ("max_model_len", int), "2": ("needed_gib", _num)}),
        ("larger than the available KV cache memory", r"available KV cache memory \(" + _NUMBER + r" GiB\)",
         {"1": ("available_gib", _num)}),
        ("estimated maximum model length", r"estimated maximum model length is (\d+)",
         {"1": ("estimated_max_len", int)}),
    )
)
# Lines that make a log recognisably vLLM's even when no figure was read from them.
_VLLM_MARKERS = ("vllm", "gpu_worker.py", "kv_cache_utils.py", "gpu_model_runner.py", "EngineCore")
# The worker prefix of multi-process logs: "(VllmWorker rank=3 pid=1)", "(Worker_TP1 pid=2)".
_RANK = re.compile(r"\((?:VllmWorker rank=|Worker_TP|Worker rank=)(\d{1,4})\b")


def parse_vllm_log(data: bytes | str, *, field_name: str = "log") -> ParsedLog:
    """The figures of a vLLM start-up log (bytes are decoded as UTF-8; size capped).

    Raises :class:`InputError` on ``field_name`` for text over :data:`MAX_LOG_BYTES`, text that
    is not UTF-8, or a log in which no vLLM line is found.
    """
    if isinstance(data, (bytes, bytearray)):
        if len(data) > MAX_LOG_BYTES:
            raise InputError(field_name, f"larger than the {MAX_LOG_BYTES:,}-byte limit")
        text = decode_text(bytes(data), field=field_name)
    elif isinstance(data, str):
        if len(data) > MAX_LOG_BYTES:
            raise InputError(field_name, f"larger than the {MAX_LOG_BYTES:,}-character limit")
        text = data
    else:
        raise InputError(field_name, f"expected text, got {type(data).__name__}")
    values: dict[str, object] = {}
    value_rank: dict[str, int | None] = {}  # the worker rank each value was read from
    found: dict[str, FoundLine] = {}
    by_rank: dict[int, float] = {}
    vllm_seen = False
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw[:_MAX_LINE_CHARS]
        if not vllm_seen and any(marker in line for marker in _VLLM_MARKERS):
            vllm_seen = True
        tag = _RANK.search(line[:200])
        rank = int(tag.group(1)) if tag else None
        for marker, pattern, groups in _RULES:
            if marker not in line:
                continue
            match = pattern.search(line)
            if not match:
                continue
            for group, (name, convert) in groups.items():
                # Rank 0's line replaces one read from another rank; otherwise the first wins.
                if name in values and not (rank == 0 and value_rank[name] not in (None, 0)):
                    if name == "available_gib" and rank is not None and rank not in by_rank:
                        by_rank[rank] = _safe(convert, match.group(int(group)))
                    continue
                try:
                    values[name] = convert(match.group(int(group)))
                except (ValueError, OverflowError):
                    continue
                value_rank[name] = rank
                if name == "available_gib" and rank is not None:
                    by_rank.setdefault(rank, values[name])
                found[name] = FoundLine(field=name, line_no=line_no, text=line.strip()[:200])
    if not found:
        hint = "it mentions vLLM but states none of its memory figures" if vllm_seen else "no vLLM line found"
        raise InputError(field_name, f"not a vLLM start-up log: {hint} (looked for 'Available KV cache memory', "
                                     "'GPU KV cache size', 'Maximum concurrency for', 'model weights take')")
    ranks = tuple(sorted((r, v) for r, v in by_rank.items() if v is not None))
    return ParsedLog(**values, available_by_rank=ranks,
                     found=tuple(sorted(found.values(), key=lambda f: (f.line_no, f.field))))


def _safe(convert, text: str) -> float | None:
    try:
        return convert(text)
    except (ValueError, OverflowError):
        return None
