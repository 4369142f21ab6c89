"""Parse a pasted vLLM start-up log: the lines that size the KV cache, wherever they appear.

Recognised (V1 from v0.8 on, plus the V0 formats users still paste): the engine config line
(model, tensor_parallel_size, dtype, kv_cache_dtype, max_seq_len, enable_prefix_caching),
``non-default args`` (with ``enable_prefix_caching`` and the speculative config's
``num_speculative_tokens``),
"Chunked prefill is enabled with max_num_batched_tokens=N", "Model loading took X GiB" /
"Loading model weights took X GB", the memory-profiling breakdown (V1's table form, V0's
one-line ``total_gpu_memory=23.58GiB … non_torch_memory=0.35GiB`` form), "Available KV cache
memory: X GiB", "GPU KV cache size: N tokens", "# GPU blocks: N", "Maximum concurrency for L
tokens per request: C x", "Add N padding layers, may waste at most P% KV cache memory",
CUDA-graph estimates and captures, and the start-up refusals.

Spacing between words and figures is free ("Available KV cache memory:   12.5 GiB" reads as
12.5), and the lines that vLLM prints as one long message but that pastes often wrap are read
over up to :data:`_WINDOW_LINES` consecutive lines:

* V1's refusal, from ``_check_enough_kv_cache_memory`` in ``vllm/v1/core/kv_cache_utils.py``:
  "To serve at least one request with the models's max seq len (N), (X GiB KV cache is needed,
  which is larger than the available KV cache memory (Y GiB). Based on the available memory,
  the estimated maximum model length is M." (vLLM 0.29 prints it without the "(" before X);
* V0's refusal: "The model's max seq len (N) is larger than the maximum number of tokens that
  can be stored in KV cache (T)";
* the profile summary of ``compile_or_warm_up_model`` in ``vllm/v1/worker/gpu_worker.py``:
  "Free memory on device (F/T GiB) on startup. Desired GPU memory utilization is (U, R GiB).
  Actual usage is W GiB for weight, A GiB for peak activation, N GiB for non-torch memory, and
  C GiB for CUDAGraph memory. … Current kv cache memory in use is K GiB." (some builds print
  "W GiB for consumed memory (weights + non-torch), A GiB for peak activation, and C GiB for
  CUDAGraph memory" instead).

Input is text already read under a size cap (:data:`MAX_LOG_BYTES`); lines longer than
:data:`_MAX_LINE_CHARS` are cut before matching, and every pattern is free of ambiguous
repetition (a figure is a digit, then digits and commas, then an optional decimal part), so each line costs one linear scan per
rule whose marker it holds. A figure outside its field's plausible range (:data:`_LIMITS`: a
400-digit token count, a negative length, a concurrency for 0 tokens) is not used; it is kept
in :attr:`ParsedLog.ignored` with the reason.

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
_WINDOW_LINES = 3  # vLLM's refusal, quoted as an issue wraps it, spans three lines
_MAX_MODEL_CHARS = 300  # a Hub id or a local path; longer is not a model name
# A figure: digits with optional thousands commas and decimals. Each character has one way to be
# matched, so a failed match backtracks at most once per character (no quadratic digit runs).
_NUMBER = r"(-?\d[\d,]*(?:\.\d+)?|-?\.\d+)"
_DECIMAL = r"(\d+(?:\.\d+)?)"  # a utilisation: "0.9", "0.95" (no trailing "." taken from the sentence)
_GIB = 1e5  # no GPU holds 100,000 GiB: a larger memory figure is not a memory figure
_TOKENS = float(1 << 40)

# The plausible range of each numeric field, inclusive. Memory terms that vLLM prints negative
# when the budget is overdrawn (available, non-torch, CUDA graphs) may be negative.
_LIMITS: dict[str, tuple[float, float]] = {
    "tp": (1, 4096), "pp": (1, 4096), "max_model_len": (1, 1 << 31), "block_size": (1, 1 << 20),
    "max_num_batched_tokens": (1, 1 << 31), "max_num_seqs": (1, 1 << 20), "speculative_tokens": (0, 64),
    "gpu_memory_utilization": (0.001, 1.0), "weights_gib": (0, _GIB), "total_gib": (0.001, _GIB),
    "requested_gib": (0, _GIB), "non_torch_gib": (-_GIB, _GIB), "activation_gib": (0, _GIB),
    "cuda_graph_gib": (-_GIB, _GIB), "consumed_gib": (0, _GIB), "available_gib": (-_GIB, _GIB),
    "kv_tokens": (0, _TOKENS), "gpu_blocks": (0, _TOKENS), "concurrency": (0, 1e9),
    "concurrency_len": (1, 1 << 31), "padding_layers": (1, 1 << 16), "padding_waste_percent": (0, 100),
    "needed_gib": (0, _GIB), "estimated_max_len": (1, 1 << 31),
}


@dataclass(frozen=True, kw_only=True)
class FoundLine:
    """Where a figure was read: the field, its 1-based line number and the line (clipped)."""

    field: str
    line_no: int
    text: str


@dataclass(frozen=True, kw_only=True)
class IgnoredFigure:
    """A figure a line states but that is not used: the field, its line, the text and why."""

    field: str
    line_no: int
    text: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class ParsedLog:
    """The figures a start-up log states; None where it does not state them.

    GiB figures are as printed (rounded to 0.01 or 0.0001 GiB); ``weights_unit`` says whether
    the weights line used GiB or vLLM's older "GB" (which was also 2**30 bytes).
    ``consumed_gib`` is weights + non-torch memory, for the builds that print them as one term.
    ``needed_gib`` and ``estimated_max_len`` come from a refusal to start; so do ``kv_tokens``
    and ``max_model_len`` of V0's refusal (``refused`` is True whenever a refusal was read).
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
    prefix_caching: bool | None = None
    speculative_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    weights_gib: float | None = None
    total_gib: float | None = None
    requested_gib: float | None = None
    non_torch_gib: float | None = None
    activation_gib: float | None = None
    cuda_graph_gib: float | None = None
    consumed_gib: float | None = None
    available_gib: float | None = None
    kv_tokens: int | None = None
    gpu_blocks: int | None = None
    concurrency: float | None = None
    concurrency_len: int | None = None
    padding_layers: int | None = None
    padding_waste_percent: float | None = None
    needed_gib: float | None = None
    estimated_max_len: int | None = None
    refused: bool = False
    available_by_rank: tuple[tuple[int, float], ...] = field(default=())  # (rank, GiB) of tagged lines
    found: tuple[FoundLine, ...] = field(default=())
    ignored: tuple[IgnoredFigure, ...] = field(default=())

    @property
    def found_fields(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f.field for f in self.found))

    @property
    def missing_fields(self) -> tuple[str, ...]:
        """The figures this log does not state (besides the bookkeeping ones)."""
        present = set(self.found_fields)
        return tuple(f.name for f in fields(self)
                     if f.name not in _BOOKKEEPING and f.name not in present)

    def as_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("found", "ignored")}
        out["found_lines"] = [{"field": f.field, "line": f.line_no, "text": f.text} for f in self.found]
        out["ignored"] = [{"field": f.field, "line": f.line_no, "text": f.text, "reason": f.reason}
                          for f in self.ignored]
        return out


_BOOKKEEPING = ("found", "ignored", "available_by_rank", "refused")


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _bool(text: str) -> bool:
    return text == "True"


def _model(text: str) -> str:
    if not text.strip() or len(text) > _MAX_MODEL_CHARS:
        raise ValueError(f"not a model name ({len(text):,} characters)")
    return text


# (marker that must appear in the text, pattern, {group: (field, converter)}, read over a window)
_RAW_RULES: tuple[tuple[str, str, dict[str, tuple[str, object]], bool], ...] = (
    ("LLM engine (v", r"LLM engine \(v([^)\s]+)\)", {"1": ("version", str)}, False),
    ("█  version ", r"█  version (\d+\.\d+[\w.+-]*)", {"1": ("version", str)}, False),
    ("with config:", r"with config: model='([^']*)'", {"1": ("model", _model)}, False),
    ("tensor_parallel_size=", r"tensor_parallel_size=(\d+)", {"1": ("tp", int)}, False),
    ("'tensor_parallel_size':", r"'tensor_parallel_size': (\d+)", {"1": ("tp", int)}, False),
    ("pipeline_parallel_size=", r"pipeline_parallel_size=(\d+)", {"1": ("pp", int)}, False),
    ("'pipeline_parallel_size':", r"'pipeline_parallel_size': (\d+)", {"1": ("pp", int)}, False),
    ("dtype=torch.", r"[^_]dtype=torch\.(\w+)", {"1": ("dtype", str)}, False),
    ("kv_cache_dtype=", r"kv_cache_dtype=(\w+)", {"1": ("kv_cache_dtype", str)}, False),
    ("'kv_cache_dtype':", r"'kv_cache_dtype': '(\w+)'", {"1": ("kv_cache_dtype", str)}, False),
    ("max_seq_len=", r"max_seq_len=(\d+)", {"1": ("max_model_len", int)}, False),
    ("Using max model len", r"Using max model len (\d+)", {"1": ("max_model_len", int)}, False),
    ("'max_model_len':", r"'max_model_len': (\d+)", {"1": ("max_model_len", int)}, False),
    ("'block_size':", r"'block_size': (\d+)", {"1": ("block_size", int)}, False),
    ("max_num_batched_tokens=", r"max_num_batched_tokens=(\d+)", {"1": ("max_num_batched_tokens", int)}, False),
    ("'max_num_batched_tokens':", r"'max_num_batched_tokens': (\d+)", {"1": ("max_num_batched_tokens", int)},
     False),
    ("'max_num_seqs':", r"'max_num_seqs': (\d+)", {"1": ("max_num_seqs", int)}, False),
    ("enable_prefix_caching", r"enable_prefix_caching'?[=:] ?(True|False)\b", {"1": ("prefix_caching", _bool)}, False),
    ("'num_speculative_tokens':", r"'num_speculative_tokens': (\d+)", {"1": ("speculative_tokens", int)}, False),
    ("'gpu_memory_utilization':", r"'gpu_memory_utilization': " + _DECIMAL, {"1": ("gpu_memory_utilization", float)},
     False),
    ("'model':", r"'model': '([^']*)'", {"1": ("model", _model)}, False),
    ("loading took", r"[Mm]odel loading took\s*" + _NUMBER + r" ?Gi?B", {"1": ("weights_gib", _num)}, False),
    ("weights took", r"Loading model weights took\s*" + _NUMBER + r" ?Gi?B", {"1": ("weights_gib", _num)}, False),
    ("weights take", r"weights take\s*" + _NUMBER + r" ?GiB", {"1": ("weights_gib", _num)}, False),
    # V1's table "total_gpu_memory (79.22GiB)" and V0's one-line "total_gpu_memory=23.58GiB".
    ("total_gpu_memory", r"total_gpu_memory(?:\s*[=(])?\s*" + _NUMBER + r" ?GiB", {"1": ("total_gib", _num)}, False),
    ("gpu_memory_utilization (", r"gpu_memory_utilization \(" + _DECIMAL + r"\) = " + _NUMBER,
     {"1": ("gpu_memory_utilization", float), "2": ("requested_gib", _num)}, False),
    ("gpu_memory_utilization ", r"gpu_memory_utilization\s+" + _DECIMAL + r"\s*$",
     {"1": ("gpu_memory_utilization", float)}, False),
    # V0's one-line profile ends "kv_cache_size=3.81GiB gpu_memory_utilization=0.90"; the GiB keeps
    # command lines ("--gpu_memory_utilization=0.98") from passing for a profile.
    ("gpu_memory_utilization=", r"GiB,?\s*gpu_memory_utilization=" + _DECIMAL, {"1": ("gpu_memory_utilization", float)},
     False),
    ("can use", r"the current vLLM instance can use\s+" + _NUMBER + r" ?GiB", {"1": ("requested_gib", _num)}, False),
    ("model weights take", r"model weights take\s+" + _NUMBER + r" ?GiB", {"1": ("weights_gib", _num)}, False),
    ("non_torch_memory", r"non_torch_memory(?:\s*=|\s+takes)?\s*" + _NUMBER + r" ?GiB",
     {"1": ("non_torch_gib", _num)}, False),
    ("activation peak memory", r"activation peak memory(?: takes)?\s+" + _NUMBER + r" ?GiB",
     {"1": ("activation_gib", _num)}, False),
    ("Estimated CUDA graph memory", r"Estimated CUDA graph memory:\s*" + _NUMBER + r"\s*GiB",
     {"1": ("cuda_graph_gib", _num)}, False),
    ("Graph capturing finished", r"Graph capturing finished in \d+ secs?, took " + _NUMBER + r" GiB",
     {"1": ("cuda_graph_gib", _num)}, False),
    ("Available KV cache memory", r"Available KV cache memory:\s*" + _NUMBER + r"\s*GiB",
     {"1": ("available_gib", _num)}, False),
    ("reserved for KV Cache", r"reserved for KV Cache is\s*" + _NUMBER + r" ?GiB", {"1": ("available_gib", _num)},
     False),
    ("available_kv_cache_memory", r"available_kv_cache_memory\s+" + _NUMBER + r" ?GiB",
     {"1": ("available_gib", _num)}, False),
    ("GPU KV cache size", r"GPU KV cache size:\s*" + _NUMBER + r"\s*tokens", {"1": ("kv_tokens", _int)}, False),
    ("blocks:", r"(?:GPU|CUDA) blocks:\s*(\d+)", {"1": ("gpu_blocks", int)}, False),
    ("kv_cache_size=", r"kv_cache_size=" + _NUMBER + r"GiB", {"1": ("available_gib", _num)}, False),
    ("Maximum concurrency for", r"Maximum concurrency for\s+" + _NUMBER + r"\s+tokens per request:\s*" + _NUMBER
     + r"\s*x", {"1": ("concurrency_len", _int), "2": ("concurrency", _num)}, False),
    ("padding layers", r"Add (\d+) padding layers, may waste at most " + _NUMBER + r"%",
     {"1": ("padding_layers", int), "2": ("padding_waste_percent", _num)}, False),
    # ---- messages that pastes wrap: read over a window of lines, words split by any whitespace
    ("needed", r"max\s+seq\s+len\s*\(\s*(\d+)\s*\),\s*(?:\(\s*)?" + _NUMBER + r"\s*GiB\s+KV\s+cache\s+is\s+needed",
     {"1": ("max_model_len", int), "2": ("needed_gib", _num)}, True),
    ("larger", r"larger\s+than\s+the\s+available\s+KV\s+cache\s+memory\s*\(\s*" + _NUMBER + r"\s*GiB",
     {"1": ("available_gib", _num)}, True),
    ("estimated", r"estimated\s+maximum\s+model\s+length\s+is\s+(\d+)", {"1": ("estimated_max_len", int)}, True),
    ("stored", r"max\s+seq\s+len\s*\(\s*(\d+)\s*\)\s+is\s+larger\s+than\s+the\s+maximum\s+number\s+of\s+tokens\s+"
     r"that\s+can\s+be\s+stored\s+in\s+KV\s+cache\s*\(\s*(\d+)\s*\)",
     {"1": ("max_model_len", int), "2": ("kv_tokens", int)}, True),
    ("Free", r"Free\s+memory\s+on\s+device\s*\(\s*" + _NUMBER + r"\s*/\s*" + _NUMBER + r"\s*GiB\s*\)",
     {"2": ("total_gib", _num)}, True),
    ("Desired", r"Desired\s+GPU\s+memory\s+utilization\s+is\s*\(\s*" + _DECIMAL + r"\s*,\s*" + _NUMBER + r"\s*GiB",
     {"1": ("gpu_memory_utilization", float), "2": ("requested_gib", _num)}, True),
    ("Actual", r"Actual\s+usage\s+is\s+" + _NUMBER + r"\s*GiB\s+for\s+weight,\s*" + _NUMBER
     + r"\s*GiB\s+for\s+peak\s+activation,\s*" + _NUMBER + r"\s*GiB\s+for\s+non-torch\s+memory,\s*and\s+" + _NUMBER
     + r"\s*GiB\s+for\s+CUDAGraph", {"1": ("weights_gib", _num), "2": ("activation_gib", _num),
                                     "3": ("non_torch_gib", _num), "4": ("cuda_graph_gib", _num)}, True),
    ("Actual", r"Actual\s+usage\s+is\s+" + _NUMBER + r"\s*GiB\s+for\s+consumed\s+memory\s*\(weights\s*\+\s*"
     r"non-torch\),\s*" + _NUMBER + r"\s*GiB\s+for\s+peak\s+activation,\s*and\s+" + _NUMBER
     + r"\s*GiB\s+for\s+CUDAGraph", {"1": ("consumed_gib", _num), "2": ("activation_gib", _num),
                                     "3": ("cuda_graph_gib", _num)}, True),
    ("Current", r"Current\s+kv\s+cache\s+memory\s+in\s+use(?:\s+is|:)\s*" + _NUMBER + r"\s*GiB",
     {"1": ("available_gib", _num)}, True),
)
_RULES = tuple((marker, re.compile(pattern), groups, windowed) for marker, pattern, groups, windowed in _RAW_RULES)
_REFUSAL_FIELDS = frozenset({"needed_gib", "estimated_max_len"})
# Flags that documents quoting vLLM's arguments also carry: alone, they do not make a log.
_FLAG_FIELDS = frozenset({"prefix_caching", "speculative_tokens"})
# Lines that make a log recognisably vLLM's even when no figure was read from them.
_VLLM_MARKERS = ("vllm", "gpu_worker.py", "kv_cache_utils.py", "gpu_model_runner.py", "EngineCore")
# The worker prefix of multi-process logs: "(VllmWorker rank=3 pid=1)", "(Worker_TP1 pid=2)".
_RANK = re.compile(r"\((?:VllmWorker rank=|Worker_TP|Worker rank=)(\d{1,4})\b")


def _convert(name: str, convert, text: str) -> object:
    """``text`` as field ``name``'s value; ValueError naming the limit when it is out of range."""
    value = convert(text)
    limits = _LIMITS.get(name)
    if limits is not None and not limits[0] <= value <= limits[1]:
        low, high = limits
        raise ValueError(f"{name} {text[:20]}{'…' if len(text) > 20 else ''} is outside {low:g}–{high:g}")
    return value


def _decoded(data: bytes | str, field_name: str) -> str:
    if isinstance(data, (bytes, bytearray)):
        if len(data) > MAX_LOG_BYTES:
            raise InputError(field_name, f"larger than the {MAX_LOG_BYTES:,}-byte limit")
        return decode_text(bytes(data), field=field_name)
    if isinstance(data, str):
        if len(data) > MAX_LOG_BYTES:
            raise InputError(field_name, f"larger than the {MAX_LOG_BYTES:,}-character limit")
        return data
    raise InputError(field_name, f"expected text, got {type(data).__name__}")


def parse_vllm_log(data: bytes | str, *, field_name: str = "log") -> ParsedLog:
    """The figures of a vLLM start-up log (bytes are decoded as UTF-8; size capped).

    Raises :class:`InputError` on ``field_name`` for text over :data:`MAX_LOG_BYTES`, text that
    is not UTF-8, or a log in which no usable vLLM figure is found (the message names the figures
    that were stated but out of range).
    """
    text = _decoded(data, field_name)
    values: dict[str, object] = {}
    value_rank: dict[str, int | None] = {}  # the worker rank each value was read from
    found: dict[str, FoundLine] = {}
    ignored: list[IgnoredFigure] = []
    by_rank: dict[int, float] = {}
    window: list[str] = []  # the last _WINDOW_LINES lines, clipped, the current one last
    vllm_seen = False
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw[:_MAX_LINE_CHARS]
        window = [*window[1 - _WINDOW_LINES:], line]
        joined = "\n".join(window)
        current_from = len(joined) - len(line)  # where the current line starts in ``joined``
        if not vllm_seen and any(marker in line for marker in _VLLM_MARKERS):
            vllm_seen = True
        tag = _RANK.search(line[:200])
        rank = int(tag.group(1)) if tag else None
        for marker, pattern, groups, windowed in _RULES:
            if marker not in (joined if windowed else line):
                continue
            if windowed:
                # A match ending before this line was read when its last line came in.
                match = next((m for m in pattern.finditer(joined) if m.end() > current_from), None)
                first_line = line_no - joined.count("\n", match.start()) if match else line_no
                shown = " ".join(match.group(0).split())[:200] if match else ""
            else:
                match = pattern.search(line)
                first_line, shown = line_no, line.strip()[:200]
            if not match:
                continue
            try:
                converted = {name: _convert(name, convert, match.group(int(group)))
                             for group, (name, convert) in groups.items()}
            except (ValueError, OverflowError) as exc:
                # One absurd figure makes the whole line suspect: none of its figures is used.
                names = ", ".join(name for name, _ in groups.values())
                ignored.append(IgnoredFigure(field=names, line_no=first_line, text=shown[:120], reason=str(exc)[:160]))
                continue
            for name, value in converted.items():
                # Rank 0's line replaces one read from another rank; otherwise the first wins.
                if name in values and not (rank == 0 and value_rank[name] not in (None, 0)):
                    if name == "available_gib" and rank is not None and rank not in by_rank:
                        by_rank[rank] = value
                    continue
                values[name] = value
                value_rank[name] = rank
                if name == "available_gib" and rank is not None:
                    by_rank.setdefault(rank, value)
                found[name] = FoundLine(field=name, line_no=first_line, text=shown)
            if marker == "stored" or _REFUSAL_FIELDS & set(converted):
                values["refused"] = True
    if not set(found) - _FLAG_FIELDS:
        if ignored:
            raise InputError(field_name, "no usable vLLM figure: " + "; ".join(
                f"line {f.line_no}: {f.reason}" for f in ignored[:3]))
        hint = "it mentions vLLM but states none of its memory figures" if vllm_seen else "no vLLM line found"
        raise InputError(field_name, f"not a vLLM start-up log: {hint} (looked for 'Available KV cache memory', "
                                     "'GPU KV cache size', 'Maximum concurrency for', 'model weights take')")
    ranks = tuple(sorted((r, v) for r, v in by_rank.items() if v is not None))
    return ParsedLog(**values, available_by_rank=ranks,
                     found=tuple(sorted(found.values(), key=lambda f: (f.line_no, f.field))),
                     ignored=tuple(ignored))
