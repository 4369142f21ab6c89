"""Tuning variants: named configurations the harness times as extra decode rows.

CPU: the table (names, one default per format, the shipped defaults), ``--variant`` parsing and
a variant row run under the interpreter against the float32 reference. GPU (``-m gpu``,
Hopper): each format's shipped default is still the fastest of the designs it was chosen over,
at the shape it was chosen at.
"""

from __future__ import annotations

import pytest
import torch

from inputs.cli import UsageError
from kernels.bench import cli
from kernels.bench.contenders import variant_contender
from kernels.bench.records import Ceilings, DecodeShape
from kernels.bench.sweeps import SweepConfig, bench_decode_shape
from kernels.bench.variants import DECODE_VARIANTS, KV_FORMATS, VARIANT_PREFIX, variant_names
from kernels.decode.backends import default_rdq_config
from kernels.decode.config import DecodeConfig
from kernels.runtime import hopper_gluon_available


def test_each_format_has_one_default_and_it_is_what_a_plain_call_runs_on_an_h200():
    defaults = {v.kv: v for v in DECODE_VARIANTS.values() if v.default}
    assert set(defaults) == set(KV_FORMATS)
    assert defaults["bf16"].config == DecodeConfig(block_n=64, num_warps=4, num_stages=3, waves=1)
    assert defaults["fp8"].config == default_rdq_config("fp8")
    assert defaults["int4"].config == default_rdq_config("int4")
    assert all(name.startswith(f"{v.kv}-") and name == v.name for name, v in DECODE_VARIANTS.items())
    # INT4-only designs are not offered on FP8, where they would run as a plain ring.
    assert not any(v.config.reg_prefetch for v in DECODE_VARIANTS.values() if v.kv == "fp8"
                   and not isinstance(v.config, DecodeConfig))


def test_variant_names_take_names_and_formats_and_refuse_the_rest():
    fp8 = variant_names("fp8")
    assert fp8 and all(DECODE_VARIANTS[n].kv == "fp8" for n in fp8)
    one = next(iter(DECODE_VARIANTS))
    assert variant_names(f"{one}, {one},bf16")[0] == one  # repeats kept once, order kept
    with pytest.raises(ValueError, match="unknown variant 'fp9'"):
        variant_names("fp9")
    with pytest.raises(UsageError, match="unknown variant 'nope'"):
        cli.build_parser().parse_args(["--variant", "nope"])
    args = cli.build_parser().parse_args(["--only", "decode", "--variant", "int4", "--no-peers"])
    config = cli.config_from_args(args)
    assert config.variants == variant_names("int4") and not config.peers


def test_list_variants_prints_every_name(capsys):
    assert cli._run(["--list-variants"]) == 0
    printed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert printed == list(DECODE_VARIANTS)


@pytest.mark.parametrize("kv", ["bf16", "fp8", "int4"])
def test_a_triton_variant_row_matches_the_reference_under_the_interpreter(kv):
    """The row a variant adds runs the one entry with its config on the harness's inputs; on CPU
    only the Triton variants can run (the rdq ones need Hopper)."""
    from kernels.bench.contenders import DecodeInputs
    from kernels.bench.timing import Rotation
    from kernels.cache.paged import build_paged_cache

    name = next(n for n, v in DECODE_VARIANTS.items() if v.kv == kv and isinstance(v.config, DecodeConfig))
    contender = variant_contender(DECODE_VARIANTS[name])
    assert contender.name == VARIANT_PREFIX + name
    d = 64
    shape = DecodeShape(batch=2, context=64, n_q_heads=4, n_kv_heads=2, head_dim=d, block_size=16)
    g = torch.Generator().manual_seed(0)
    c = build_paged_cache([64, 64], block_size=16, n_kv_heads=2, head_dim=d, shuffle=True, generator=g)
    q = torch.randn(1, 2, 4, d, generator=g).to(torch.bfloat16)
    x = DecodeInputs(shape=shape, q=q, k=c.k_cache, v=c.v_cache, tables=c.block_tables[None], lens=c.seq_lens,
                     rot=Rotation(1), check_rows=[0, 1])
    x.ref = x.reference(c.k_cache, c.v_cache)
    prepared = contender.prepare(x) if contender.prepare is not None else None
    err, note = contender.build(x, prepared).check()
    assert err < 0.05, (name, err, note)


@pytest.mark.gpu
@pytest.mark.skipif(not hopper_gluon_available(), reason="needs Gluon and a CUDA device of capability 9.x")
@pytest.mark.parametrize("kv, beaten", [
    # FP8: the swapped ring at 4 programs per SM against the row design and the uncapped ring
    ("fp8", ("fp8-rdq-32x3st", "fp8-rdq-swap-32x3st")),
    # INT4: registers instead of a ring, against the best ring designs
    ("int4", ("int4-rdq-swap-16x3st-ring-scales", "int4-rdq-swap-16x4st", "int4-rdq-32x3st")),
    # bf16: the Triton default against its neighbours in tile and depth
    ("bf16", ("bf16-triton-32x4w3s-waves-1", "bf16-triton-64x4w4s-waves-1")),
])
def test_the_shipped_default_still_beats_the_designs_it_was_chosen_over(kv, beaten):
    """At batch 8 x 32K, 32/8 heads (the large shape the defaults were chosen at), CUDA-graph
    medians: the default within 2 % of (or faster than) every design it beat. The harness's
    full tuning run (``--variant``) is where the figures are kept; this guards the choice."""
    default = next(n for n, v in DECODE_VARIANTS.items() if v.kv == kv and v.default)
    shape = DecodeShape(batch=8, context=32768, n_q_heads=32, n_kv_heads=8, head_dim=128, block_size=16)
    ceilings = Ceilings(copy_tbps=None, copy_buffer_bytes=0, matmul_tflops=None, matmul_n=0)
    result = bench_decode_shape(shape, ceilings, config=SweepConfig(variants=(default, *beaten), rep_ms=60.0),
                                contenders=())
    times = {m.contender.removeprefix(VARIANT_PREFIX): m.median_ms for m in result.measurements}
    assert all(times[n] for n in (default, *beaten)), times
    for name in beaten:
        assert times[default] <= 1.02 * times[name], (default, name, times)
