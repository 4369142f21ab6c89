#!/usr/bin/env bash
# Fetch into ./.peers the wheels of the two CUDA libraries the kernel benchmark times as paged peers
# (kernels/bench/peers.py), for a GPU machine with Python 3.12 and torch 2.11 but no package index.
# Run from the project root on any machine with pip and a network. Then, on the GPU machine:
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/peers .peers/*.whl
#   export PYTHONPATH=/tmp/peers FLASHINFER_WORKSPACE_BASE=/tmp/flashinfer TVM_FFI_CACHE_DIR=/tmp/tvm-ffi
# FlashInfer compiles each kernel it runs with the machine's nvcc on first use (30-45 s a module).
#
# FlashInfer's wheel (62 MB) is repacked without the CUDA sources of kernels the benchmark never
# builds (MoE, GEMM, MLA, Blackwell-only attention), to about 28 MB: its Python package, headers and
# the decode, prefill and page sources stay, so the three wheels fit in one 64 MiB transfer.
set -euo pipefail
FLASHINFER=0.7.2.post1 TVM_FFI=0.1.15.post2 CUDNN_FRONTEND=1.32.0
grep -qx '/.peers/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.peers/' >> .git/info/exclude; }
rm -rf .peers && mkdir -p .peers/full
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .peers/full \
  "flashinfer-python==$FLASHINFER" "apache-tvm-ffi==$TVM_FFI" "nvidia-cudnn-frontend==$CUDNN_FRONTEND"
mv .peers/full/apache_tvm_ffi-*.whl .peers/full/nvidia_cudnn_frontend-*.whl .peers/
python3 - .peers/full/flashinfer_python-*.whl .peers <<'PY'
import base64, hashlib, re, sys, zipfile
from pathlib import Path

source, target = Path(sys.argv[1]), Path(sys.argv[2])
csrc = "flashinfer/data/csrc/"
kept_csrc = re.compile(r"(batch_decode|batch_prefill|page)[^/]*$|[^/]*\.(h|cuh)$")
kept_code = (".py", ".pyi", ".json", ".typed", ".jinja", ".h", ".cuh", ".inc")


def keep(name: str) -> bool:
    if ".dist-info/" in name or name.startswith("flashinfer/data/") and not name.startswith(csrc):
        return True  # metadata, headers (FlashInfer's, CUTLASS's, CCCL's, spdlog's)
    if name.startswith(csrc):
        return kept_csrc.fullmatch(name[len(csrc):]) is not None
    return name.endswith(kept_code)  # the Python package; kernel sources elsewhere are not built here


with zipfile.ZipFile(source) as src, zipfile.ZipFile(target / source.name, "w", zipfile.ZIP_DEFLATED) as out:
    names = [n for n in src.namelist() if keep(n) and not n.endswith(".dist-info/RECORD")]
    record = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
    rows = []
    for name in names:
        data = src.read(name)
        out.writestr(name, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{name},sha256={digest},{len(data)}")
    out.writestr(record, "\n".join(rows + [f"{record},,"]) + "\n")
print(f"{source.name}: {len(names)} files kept")
PY
rm -rf .peers/full
du -sh .peers/*
