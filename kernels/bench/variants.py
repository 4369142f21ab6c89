"""Tuning through the harness: named kernel configurations timed as extra decode contenders.

A variant is one launch configuration of a decode kernel on one KV format: the shipped default
(``default``) and the candidates it was chosen over, so that a tuning run is an ordinary
results file (``python -m kernels.bench --only decode --variant fp8 --json
benchmarks/results/tuning/NAME.json``) whose rows say which configuration ran, not prose.
Each variant's row is named ``variant:<name>`` and runs the one decode entry with the
variant's config (which also picks the kernel: a ``DecodeConfig`` the Triton kernels, an
``RdqConfig`` the register-dequant kernel, Hopper only).

Names: ``<kv>-<kernel>-<configuration>``; ``--variant`` takes names, or a KV format (``bf16``,
``fp8``, ``int4``) for all of its variants.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

import torch

from kernels.decode.backends import default_rdq_config
from kernels.decode.config import FP8_DTYPE, DecodeConfig, default_config
from kernels.decode.int4 import default_int4_config
from kernels.decode.rdq_config import RDQ_CONFIGS, RdqConfig

__all__ = ["VARIANT_PREFIX", "KV_FORMATS", "DecodeVariant", "DECODE_VARIANTS", "variant_names"]

VARIANT_PREFIX = "variant:"
KV_FORMATS = ("bf16", "fp8", "int4")


@dataclass(frozen=True, kw_only=True)
class DecodeVariant:
    name: str
    kv: str  # one of KV_FORMATS: which copy of the shape's cache it reads
    config: DecodeConfig | RdqConfig
    default: bool  # what a plain call runs on this format on an H200 (bf16: Triton; FP8, INT4: rdq)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _triton_name(cfg: DecodeConfig) -> str:
    """``64x4w3s`` plus every field that differs from the dataclass default."""
    base = DecodeConfig()
    extra = [f"{f.name}={getattr(cfg, f.name)}" for f in fields(cfg)
             if f.name not in ("block_n", "num_warps", "num_stages") and getattr(cfg, f.name) != getattr(base, f.name)]
    return _slug(f"{cfg.block_n}x{cfg.num_warps}w{cfg.num_stages}s " + " ".join(extra))


def _triton_candidates(kv: str) -> tuple[DecodeConfig, ...]:
    """The Triton kernels' default on ``kv`` and its neighbours in tile, warps and depth."""
    shipped = {"bf16": default_config(128, torch.bfloat16), "fp8": default_config(128, FP8_DTYPE),
               "int4": default_int4_config(128)}[kv]
    others = [DecodeConfig(**{**{f.name: getattr(shipped, f.name) for f in fields(shipped)}, **change})
              for change in ({"block_n": max(16, shipped.block_n // 2)}, {"block_n": shipped.block_n * 2},
                             {"num_warps": 8}, {"num_stages": shipped.num_stages + 1})]
    return (shipped, *dict.fromkeys(c for c in others if c != shipped))


def _build() -> dict[str, DecodeVariant]:
    out: dict[str, DecodeVariant] = {}
    for kv in KV_FORMATS:
        for i, cfg in enumerate(_triton_candidates(kv)):
            name = f"{kv}-triton-{_triton_name(cfg)}"
            out[name] = DecodeVariant(name=name, kv=kv, config=cfg, default=i == 0 and kv == "bf16")
        if kv == "bf16":
            continue
        shipped = default_rdq_config(kv)
        for cfg in dict.fromkeys((shipped, *RDQ_CONFIGS)):
            if kv == "fp8" and (cfg.ring_scales or cfg.reg_prefetch or cfg.bf16_partials):
                continue  # INT4-only designs: on FP8 they run as the plain ring, a duplicate
            name = f"{kv}-{_slug(cfg.name)}"
            out[name] = DecodeVariant(name=name, kv=kv, config=cfg, default=cfg == shipped)
    return out


DECODE_VARIANTS: dict[str, DecodeVariant] = _build()


def variant_names(asked: str) -> tuple[str, ...]:
    """The variants a ``--variant`` value names: comma-separated names or KV formats, in the
    table's order; an unknown one raises ``ValueError`` listing what exists."""
    wanted: list[str] = []
    for part in (p.strip() for p in asked.split(",")):
        if part in KV_FORMATS:
            wanted += [n for n, v in DECODE_VARIANTS.items() if v.kv == part]
        elif part in DECODE_VARIANTS:
            wanted.append(part)
        else:
            raise ValueError(f"unknown variant {part!r}: one of {', '.join(KV_FORMATS)} or a name from "
                             f"python -m kernels.bench --list-variants")
    return tuple(dict.fromkeys(wanted))
