"""The CUDA libraries' paged decode, as optional contenders on this package's pool and tables.

* ``cudnn_paged``: cuDNN's SDPA graph with a page table for K and one for V (the
  ``nvidia-cudnn-frontend`` package, on the cuDNN torch ships). A 16-bit cache only: cuDNN has no
  FP8 KV with a 16-bit query.
* ``flashinfer_tc`` / ``flashinfer_cuda``: FlashInfer's ``BatchDecodeWithPagedKVCacheWrapper`` on
  its tensor-core path (``use_tensor_cores=True``, the prefill kernel with one query row) and its
  CUDA-core decode kernel; ``_fp8`` variants read an e4m3 copy of the cache with one scale per
  tensor (FlashInfer takes scalar scales).

Both read the pool as it is: ``[num_blocks, n_kv_heads, block_size, head_dim]`` is cuDNN's
container layout and FlashInfer's ``HND``. Each rotation of the inputs gets its own plan (its
pages differ), so graph replays walk different memory as the other contenders' do.

Neither library installs on the GPU machine from a registry: ``scripts/peer_wheels.sh`` fetches
them. Where one does not import, its rows say "not available" and the run goes on.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable

import torch

__all__ = ["CUDNN_PACKAGE", "FLASHINFER_PACKAGE", "available", "prepare_cudnn", "build_cudnn",
           "prepare_flashinfer", "build_flashinfer"]

CUDNN_PACKAGE = "nvidia-cudnn-frontend"
FLASHINFER_PACKAGE = "flashinfer-python"
_MODULES = {CUDNN_PACKAGE: "cudnn", FLASHINFER_PACKAGE: "flashinfer"}
# FlashInfer's split-KV partials live here; its examples size it at 128 MiB for batches of this order.
FLASHINFER_WORKSPACE_BYTES = 256 * 2**20


def available(package: str) -> bool:
    """Whether ``package``'s module imports here (looked up, not imported: FlashInfer's import is slow)."""
    return importlib.util.find_spec(_MODULES[package]) is not None


def _sequence_pages(lens: torch.Tensor, block_size: int) -> torch.Tensor:
    """Pages each sequence holds, ``ceil(len / block_size)``, as int32 ``[batch]``."""
    return ((lens + block_size - 1) // block_size).to(torch.int32)


# ----------------------------------------------------------------------------------------------
# cuDNN
# ----------------------------------------------------------------------------------------------


def prepare_cudnn(x) -> dict:
    """One cuDNN graph for the shape (built against rotation 0; every rotation has the same
    shapes and strides), its workspace and handle. ``x`` is a :class:`kernels.bench.contenders.DecodeInputs`."""
    import cudnn

    s, q0 = x.shape, x.q[0].unsqueeze(2)  # [B, Hq, 1, D]
    if x.k.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"cuDNN's paged graph takes a 16-bit cache, not {x.k.dtype}")
    io = cudnn.data_type.BFLOAT16 if x.k.dtype == torch.bfloat16 else cudnn.data_type.HALF
    handle = cudnn.create_handle()
    graph = cudnn.pygraph(io_data_type=io, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT)
    table0 = x.tables[0].unsqueeze(1).unsqueeze(-1)  # [B, 1, blocks, 1]
    lens_q = torch.ones(s.batch, 1, 1, 1, dtype=torch.int32, device=x.q.device)
    lens_kv = x.lens.view(s.batch, 1, 1, 1).contiguous()
    t = {name: graph.tensor_like(value) for name, value in
         (("q", q0), ("k", x.k), ("v", x.v), ("k_table", table0), ("v_table", table0.clone()),
          ("lens_q", lens_q), ("lens_kv", lens_kv))}
    o, _ = graph.sdpa(name="paged_decode", q=t["q"], k=t["k"], v=t["v"], generate_stats=False,
                      attn_scale=1.0 / math.sqrt(s.head_dim), use_causal_mask=False, use_padding_mask=True,
                      seq_len_q=t["lens_q"], seq_len_kv=t["lens_kv"], paged_attention_k_table=t["k_table"],
                      paged_attention_v_table=t["v_table"], paged_attention_max_seq_len_kv=s.context)
    out = torch.empty_like(q0)
    o.set_output(True).set_dim(list(out.shape)).set_stride(list(out.stride()))
    graph.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    workspace = torch.empty(max(1, graph.get_workspace_size()), dtype=torch.uint8, device=x.q.device)
    return dict(cudnn=cudnn, graph=graph, tensors=t, out_tensor=o, handle=handle, workspace=workspace,
                lens_q=lens_q, lens_kv=lens_kv, out=out)


def build_cudnn(x, g: dict):
    """The timed call: the graph executed on the next rotation's query and table."""
    from kernels.bench.contenders import Timed

    cudnn, graph, t, handle = g["cudnn"], g["graph"], g["tensors"], g["handle"]
    tables = x.tables.unsqueeze(2).unsqueeze(-1)  # [rot, B, 1, blocks, 1]

    def call(i: int) -> torch.Tensor:
        cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)  # the capture's stream in a graph
        out = g["out"]
        graph.execute({t["q"]: x.q[i].unsqueeze(2), t["k"]: x.k, t["v"]: x.v, t["k_table"]: tables[i],
                       t["v_table"]: tables[i], t["lens_q"]: g["lens_q"], t["lens_kv"]: g["lens_kv"],
                       g["out_tensor"]: out}, g["workspace"], handle=handle)
        return out

    return Timed(run=lambda: call(x.rot.next()), check=lambda: x.err_of(call(0).squeeze(2)))


# ----------------------------------------------------------------------------------------------
# FlashInfer
# ----------------------------------------------------------------------------------------------


def _fp8_per_tensor(x) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    """An e4m3 copy of the pool with one scale per tensor (``amax / 448``)."""
    from kernels.cache.paged import quantize_kv_fp8

    k8, v8, ks, vs = quantize_kv_fp8(x.k, x.v, per_head=False)
    return k8, v8, float(ks.reshape(-1)[0]), float(vs.reshape(-1)[0])


def prepare_flashinfer(tensor_cores: bool, fp8: bool) -> Callable:
    """A ``prepare`` that plans one FlashInfer wrapper per rotation on the (FP8 copy of the) pool."""

    def prepare(x) -> dict:
        import flashinfer

        s, device = x.shape, x.q.device
        k, v, ks, vs = _fp8_per_tensor(x) if fp8 else (x.k, x.v, None, None)
        workspace = torch.empty(FLASHINFER_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        pages = _sequence_pages(x.lens, s.block_size)
        indptr = torch.zeros(s.batch + 1, dtype=torch.int32, device=device)
        indptr[1:] = torch.cumsum(pages, 0)
        last = (x.lens - (pages - 1) * s.block_size).to(torch.int32)
        used = torch.arange(x.tables.shape[2], device=device)[None, :] < pages[:, None]  # [B, blocks]
        wrappers = []
        for i in range(x.tables.shape[0]):
            w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, kv_layout="HND",
                                                              use_tensor_cores=tensor_cores)
            w.plan(indptr, x.tables[i][used].to(torch.int32), last, s.n_q_heads, s.n_kv_heads, s.head_dim,
                   s.block_size, pos_encoding_mode="NONE", q_data_type=x.q.dtype, kv_data_type=k.dtype,
                   sm_scale=1.0 / math.sqrt(s.head_dim))
            wrappers.append(w)
        return dict(wrappers=wrappers, k=k, v=v, k_scale=ks, v_scale=vs)

    return prepare


def build_flashinfer(x, p: dict):
    """The timed call: the next rotation's planned wrapper on its query."""
    from kernels.bench.contenders import Timed

    wrappers, kv, ks, vs = p["wrappers"], (p["k"], p["v"]), p["k_scale"], p["v_scale"]
    scales = {} if ks is None else dict(k_scale=ks, v_scale=vs)

    def call(i: int) -> torch.Tensor:
        return wrappers[i].run(x.q[i], kv, **scales)

    def check() -> tuple[float, str]:
        if ks is None:
            return x.err_of(call(0))
        err, _ = x.err_of(call(0), x.reference(p["k"], p["v"], ks, vs))
        return err, "vs fp32 reference on the dequantised FP8 cache (one scale per tensor)"

    return Timed(run=lambda: call(x.rot.next()), check=check)
