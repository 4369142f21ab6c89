"""SGLang's Triton MLA decode as a benchmark peer: its source loaded from a folder, called on our latent pool.

SGLang serves DeepSeek-style MLA on its Triton backend with ``decode_attention_fwd`` (source file
``sglang/kernels/ops/attention/decode_attention.py``): a grouped stage 1 over ``Lk = 576`` keys
(``BLOCK_DMODEL`` 512 + ``BLOCK_DPE`` 64), 16 query heads and 32 tokens a program, ``num_kv_splits``
parts per sequence, then a stage 2 that merges the parts over ``Lv = 512``. Its wheel is built for
one Python and pulls in the whole server, so ``scripts/peer_sources.sh`` keeps only that file and
``score_mod.py`` (under ``.peers/src/sglang``); :func:`load_sglang_decode` runs them with stand-ins
for the four helpers they import from ``sglang.srt`` (on CUDA those answer "not ROCm", and the
environment flags are read only on ROCm paths).

The same pool serves both kernels: our ``[num_blocks, block_size, 576]`` latent viewed as SGLang's
``[slots, 1, 576]`` buffer (``slot = page × block_size + offset``, which its page-aware address math
reads with ``page_size = block_size``), V as the first 512 values of the same rows, and
``kv_indices`` the slot of every token of every sequence. Building those indices (``B × L`` int32)
and the query's concatenation happen once, outside the timed call, as the engine does them outside
the attention kernel.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path

import torch

from kernels.cache.mla import MlaLatentCache

__all__ = ["PEER_SOURCES_ENV", "DEFAULT_PEER_SOURCES", "SGLANG_KV_SPLITS", "sglang_source_dir", "load_sglang_decode",
           "sglang_mla_call"]

PEER_SOURCES_ENV = "KVX_PEER_SOURCES"  # a folder holding sglang/decode_attention.py and score_mod.py
DEFAULT_PEER_SOURCES = Path(".peers/src")
# SGLang's --triton-attention-num-kv-splits default: the most parts its scheduler gives a sequence.
SGLANG_KV_SPLITS = 8
_MODULE = "sglang.kernels.ops.attention.decode_attention"


def sglang_source_dir() -> Path:
    return Path(os.environ.get(PEER_SOURCES_ENV) or DEFAULT_PEER_SOURCES) / "sglang"


class _Flag:
    """An SGLang environment flag as its ``envs`` registry returns it: ``.get()`` gives the default."""

    def get(self) -> bool:
        return False


class _Envs(types.ModuleType):
    def __getattr__(self, name: str) -> _Flag:
        return _Flag()


def _package(name: str) -> types.ModuleType:
    module = sys.modules.get(name) or types.ModuleType(name)
    module.__path__ = []  # a package, so its children can be imported under it
    sys.modules[name] = module
    return module


def load_sglang_decode(folder: Path | None = None) -> types.ModuleType:
    """SGLang's decode-attention module from ``folder`` (default :func:`sglang_source_dir`).

    Raises FileNotFoundError naming the folder and the script that fills it when the source is missing.
    """
    if _MODULE in sys.modules:
        return sys.modules[_MODULE]
    folder = sglang_source_dir() if folder is None else Path(folder)
    source = folder / "decode_attention.py"
    if not source.is_file() or not (folder / "score_mod.py").is_file():
        raise FileNotFoundError(f"SGLang's Triton decode source is not in {folder} (run scripts/peer_sources.sh)")
    for name in ("sglang", "sglang.srt", "sglang.kernels", "sglang.kernels.ops", "sglang.kernels.ops.attention"):
        _package(name)
    sys.modules["sglang.srt.environ"] = environ = types.ModuleType("sglang.srt.environ")
    environ.envs = _Envs("envs")
    sys.modules["sglang.srt.utils"] = utils = types.ModuleType("sglang.srt.utils")
    utils.is_hip = lambda: False
    utils.is_gfx95_supported = lambda: False
    utils.is_gfx1250_supported = lambda: False
    utils.get_device_core_count = lambda index=0: torch.cuda.get_device_properties(index).multi_processor_count
    for name, path in (("sglang.kernels.ops.attention.score_mod", folder / "score_mod.py"), (_MODULE, source)):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[_MODULE]


def _token_slots(cache: MlaLatentCache) -> tuple[torch.Tensor, torch.Tensor]:
    """``kv_indptr`` [batch + 1] and ``kv_indices`` [sum of lengths] (int32 slots of the flat pool)."""
    bs, lens = cache.block_size, cache.seq_lens.long()
    width = cache.block_tables.shape[1] * bs
    tokens = torch.arange(width, device=lens.device)
    slots = cache.block_tables.long()[:, tokens // bs] * bs + tokens % bs  # [batch, width]
    indices = slots[tokens[None, :] < lens[:, None]].to(torch.int32)
    indptr = torch.zeros(cache.batch + 1, dtype=torch.int32, device=lens.device)
    indptr[1:] = torch.cumsum(lens, 0).to(torch.int32)
    return indptr, indices


def sglang_mla_call(module: types.ModuleType, q_latent: torch.Tensor, q_rope: torch.Tensor, cache: MlaLatentCache, *,
                    sm_scale: float, kv_splits: int = SGLANG_KV_SPLITS) -> Callable[[int], torch.Tensor]:
    """A call of SGLang's MLA decode on ``cache`` for query rotation ``i``.

    ``q_latent`` [rotations, batch, heads, rank] and ``q_rope`` [rotations, batch, heads, rope]; the
    call returns ``[batch, heads, rank]``. Every sequence gets ``kv_splits`` parts. A 16-bit cache
    only: SGLang's FP8 path takes the query in FP8 too, which is another computation.
    """
    if cache.scale is not None:
        raise ValueError("the SGLang peer reads a 16-bit latent cache only")
    if not 1 <= kv_splits <= 64:
        raise ValueError(f"kv_splits must lie in 1..64, got {kv_splits}")
    rank = cache.kv_lora_rank
    q = torch.cat([q_latent, q_rope], dim=-1).contiguous()  # [rotations, B, H, rank + rope]
    k_buffer = cache.latent.view(-1, 1, cache.latent.shape[-1])  # [slots, 1, rank + rope]
    v_buffer = k_buffer[..., :rank]
    indptr, indices = _token_slots(cache)
    _, batch, heads, _ = q.shape
    out = torch.empty(batch, heads, rank, dtype=q.dtype, device=q.device)
    logits = torch.empty(batch, heads, kv_splits, rank, dtype=torch.float32, device=q.device)
    lse = torch.empty(batch, heads, kv_splits, dtype=torch.float32, device=q.device)
    splits = torch.full((batch,), kv_splits, dtype=torch.int32, device=q.device)

    def call(i: int) -> torch.Tensor:
        module.decode_attention_fwd(q[i], k_buffer, v_buffer, out, indptr, indices, logits, lse, splits, kv_splits,
                                    sm_scale, 1.0, 1.0, has_mla=True, page_size=cache.block_size)
        return out

    return call
