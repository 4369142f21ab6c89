#!/usr/bin/env bash
# Fetch into ./.peers/src the Triton source of SGLang's decode attention (its MLA decode: the grouped
# kernel with a 512 + 64 latent), which the MLA section of the kernel benchmark times as its Triton peer
# (kernels/bench/triton_peers.py). The wheel itself is built for another Python and pulls in the
# whole server, so only the two kernel files are kept; the loader stubs the few helpers they import.
# Run from the project root on any machine with pip and a network; then carry .peers to the GPU machine.
set -euo pipefail
SGLANG=0.5.23
grep -qx '/.peers/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.peers/' >> .git/info/exclude; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: -d "$work" "sglang==$SGLANG"
mkdir -p .peers/src/sglang
for name in decode_attention.py score_mod.py; do
  unzip -p "$work"/sglang-*.whl "sglang/kernels/ops/attention/$name" > ".peers/src/sglang/$name"
done
echo "sglang==$SGLANG" > .peers/src/sglang/VERSION
ls -l .peers/src/sglang
