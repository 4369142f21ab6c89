"""`python -m kernels.bench`: options map onto the sweep, bad arguments are one line naming
the argument with exit status 2 (checked before the GPU is looked for)."""

import subprocess
import sys

import pytest

from kernels.bench.cli import build_parser, config_from_args
from kernels.bench.sweeps import SweepConfig


def sweep(*argv: str) -> SweepConfig:
    return config_from_args(build_parser().parse_args(list(argv)))


def test_options_choose_a_subset_of_the_sweep():
    config = sweep("--quick", "--only", "decode", "--batch", "1,8", "--context", "4k,32k",
                   "--heads", "64:8", "--block-size", "32", "--long-context", "0", "--rep-ms", "5")
    assert config.decode_batches == (1, 8)
    assert config.decode_contexts == (4096, 32768)  # k = 1024 tokens
    assert config.decode_heads == ((64, 8),)
    assert config.block_size == 32
    assert config.b1_long_contexts == ()  # 0 turns the batch-1 long context off
    assert config.rep_ms == 5.0
    assert (config.run_decode, config.run_prefill, config.run_memory) == (True, False, False)


def test_defaults_are_the_full_sweep():
    config = sweep()
    assert config.decode_batches == (1, 8, 32, 128)
    assert config.decode_contexts == (1024, 4096, 16384, 32768)
    assert config.b1_long_contexts == (131072,)
    assert config.decode_heads == ((32, 8), (64, 8))
    assert config.prefill_ns == (1024, 4096, 8192, 16384)


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--batch", "abc"], "--batch"),
        (["--context", "0"], "--context"),
        (["--heads", "6:4"], "--heads"),
        (["--heads", "32-8"], "--heads"),
        (["--block-size", "0"], "--block-size"),
        (["--rep-ms", "-1"], "--rep-ms"),
        (["--only", "everything"], "--only"),
    ],
)
def test_bad_arguments_are_one_line_naming_the_argument(argv, named):
    done = subprocess.run([sys.executable, "-m", "kernels.bench", *argv], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"argument {named}" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_mixed_batches_run_in_the_full_and_quick_sweeps():
    from kernels.bench.mixed import mixed_batches

    assert sweep().run_mixed and not sweep().mixed_quick
    assert sweep("--quick").mixed_quick  # --quick keeps the two smaller batches only
    only = sweep("--only", "mixed")
    assert (only.run_decode, only.run_prefill, only.run_mixed, only.run_memory) == (False, False, True, False)
    full, quick = mixed_batches(), mixed_batches(quick=True)
    assert [s.name for s in quick] == [s.name for s in full[1:]]
    busy, one_chunk, prefill = full
    # 4 chunks of 512 over prefixes 0, 4K, 8K, 16K and 64 decode rows spread over 4K..32K
    assert busy.q_lens[:4] == (512,) * 4 and busy.seq_lens[:4] == (512, 4608, 8704, 16896)
    assert busy.n_decode == 64 and (busy.seq_lens[4], busy.seq_lens[-1]) == (4096, 32768)
    assert one_chunk.q_lens == (2048,) + (1,) * 256 and set(one_chunk.seq_lens[1:]) == {4096}
    assert prefill.prefill_only and not busy.prefill_only
