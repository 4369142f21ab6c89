"""The interconnect catalogue: each rate per direction against the vendor's own quoted figure, with
the unit conversion (Gb/s vs GB/s, 10**9) written out here."""

from __future__ import annotations

import pytest

from hardware.links import LINK_IDS, MAX_NICS, check_nics, get_link, links
from inputs.errors import InputError


@pytest.mark.parametrize(("link_id", "bytes_per_s"), [
    # NVLink is quoted in bytes, both directions together: 900 GB/s / 2 and 1.8 TB/s / 2.
    ("nvlink4", 900 * 10**9 // 2),
    ("nvlink5", 1_800 * 10**9 // 2),
    # Network rates are quoted in bits: Gb/s × 10**9 / 8.
    ("ib-ndr", 400 * 10**9 // 8),  # 50 GB/s
    ("ib-xdr", 800 * 10**9 // 8),  # 100 GB/s
    ("roce-400", 400 * 10**9 // 8),
    ("eth-100", 100 * 10**9 // 8),  # 12.5 GB/s
    ("eth-25", 25 * 10**9 // 8),  # 3.125 GB/s
    # PCIe: GT/s per lane × 16 lanes, 128 data bits in 130, / 8 bits per byte, floored.
    ("pcie4-x16", 31_507_692_307),  # 16e9 × 16 × 128 / 130 / 8 = 31,507,692,307.7
    ("pcie5-x16", 63_015_384_615),  # 32e9 × 16 × 128 / 130 / 8 = 63,015,384,615.4
])
def test_bandwidth_per_direction(link_id, bytes_per_s):
    assert get_link(link_id).bytes_per_s == bytes_per_s


def test_pcie_encoding_is_what_separates_the_spec_from_the_rounded_datasheet_figure():
    # H100 datasheet: "PCIe Gen5: 128GB/s" both ways, i.e. 64 GB/s each way before 128b/130b.
    gen5 = get_link("pcie5-x16").bytes_per_s
    assert gen5 < 64 * 10**9 and gen5 == 64 * 10**9 * 128 // 130


def test_nics_multiply_the_bandwidth():
    assert get_link("ib-ndr").bytes_per_s_for(8) == 400 * 10**9  # 8 × 50 GB/s
    assert get_link("eth-100").bytes_per_s_for(2) == 25 * 10**9


def test_every_link_has_a_source_and_a_plausible_latency():
    assert len(links()) == len(LINK_IDS) == 9
    for link in links():
        assert link.source and link.quoted and link.bytes_per_s > 0
        assert link.latency_ns is None or link.latency_ns > 0
    # Scale-up NVLink is an order of magnitude above any NIC.
    assert get_link("nvlink4").bytes_per_s >= 9 * get_link("ib-ndr").bytes_per_s


def test_lookup_is_case_insensitive_and_names_the_field():
    assert get_link("IB-NDR") is get_link("ib-ndr")
    with pytest.raises(InputError) as info:
        get_link("token-ring")
    assert info.value.field == "link" and "nvlink4" in info.value.message


@pytest.mark.parametrize("nics", [0, -1, MAX_NICS + 1, True, 2.0, "8"])
def test_nic_count_is_validated(nics):
    with pytest.raises(InputError) as info:
        check_nics(nics)
    assert info.value.field == "nics"
    with pytest.raises(InputError):
        get_link("ib-ndr").bytes_per_s_for(nics)
