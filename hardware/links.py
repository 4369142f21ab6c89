"""Interconnect catalogue: the links a KV cache crosses between GPUs, each with its bandwidth per
direction, a per-transfer latency where the vendor publishes one, and its source.

Units, kept apart on purpose:

* Network and PCIe rates are quoted in **bits** per second (``Gb/s``, ``GT/s``; 10**9). A 400 Gb/s
  NIC moves 400 × 10**9 / 8 = 50 × 10**9 bytes per second per direction.
* NVLink is quoted in **bytes** per second (``GB/s``; 10**9) and as the *total of both directions*
  over all of a GPU's links: "900 GB/s" for NVLink 4 is 450 GB/s each way.
* Every figure here is **per direction** and for **one** link (one NIC port, or one GPU's whole
  NVLink); :meth:`Link.bytes_per_s_for` multiplies by the NICs a transfer stripes over.

Rates are stored as line bits per second and the fraction of those bits that carries data:
PCIe quotes the raw transfer rate and loses 2 bits in 130 to its 128b/130b encoding; InfiniBand,
Ethernet and NVLink quote their data rate already. Protocol headers (Ethernet/IP/UDP, IB
transport, PCIe TLPs) are not deducted: the figures are ceilings, not goodputs. Bytes per second
are exact integers (floored where the encoding leaves a fraction).
"""

from __future__ import annotations

from dataclasses import dataclass

from inputs.errors import InputError, shown

MAX_NICS = 64  # rails per GPU or host: 8 is today's widest (one NIC per GPU, 8 GPUs); 64 rejects typos


@dataclass(frozen=True, kw_only=True)
class Link:
    """One interconnect, per direction.

    Attributes
    ----------
    id, name : str
    line_bits_per_s : int
        Bits per second on the wire in one direction, as the standard or vendor quotes it.
    payload_bits, line_bits : int
        Of every ``line_bits`` bits on the wire, ``payload_bits`` carry data (128 of 130 for
        PCIe Gen3-5; 1 of 1 where the quoted rate is already the data rate).
    latency_ns : int or None
        A typical per-transfer latency from the vendor, nanoseconds; None where none is published.
    quoted : str
        The figure as the source states it ("900 GB/s total bandwidth"), for labels.
    source : str
        Where the figure comes from (datasheet or specification, with its URL).
    """

    id: str
    name: str
    line_bits_per_s: int
    payload_bits: int = 1
    line_bits: int = 1
    latency_ns: int | None = None
    quoted: str
    source: str
    note: str = ""

    @property
    def bytes_per_s(self) -> int:
        """Data bytes per second in one direction over one link (floored to whole bytes)."""
        return self.line_bits_per_s * self.payload_bits // (self.line_bits * 8)

    def bytes_per_s_for(self, nics: int = 1) -> int:
        """Bytes per second in one direction when a transfer stripes over ``nics`` such links."""
        return self.bytes_per_s * check_nics(nics)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.bytes_per_s / 10**9:,.1f} GB/s per direction)"


def check_nics(nics: object, field: str = "nics") -> int:
    """``nics`` as a whole number from 1 to :data:`MAX_NICS`; :class:`InputError` on ``field`` otherwise."""
    if isinstance(nics, bool) or not isinstance(nics, int) or not 1 <= nics <= MAX_NICS:
        raise InputError(field, f"must be a whole number from 1 to {MAX_NICS}, got {shown(nics)}")
    return nics


_GBIT = 10**9
_H100 = "https://www.nvidia.com/en-us/data-center/h100/"
_H200 = "https://www.nvidia.com/en-us/data-center/h200/"
_CX7 = "https://docs.nvidia.com/networking/display/ConnectX7VPI/Introduction"
_CX8 = "https://docs.nvidia.com/networking/display/connectx8supernic/introduction"
_PCIE = "https://pcisig.com/specifications"
_ETH = "IEEE 802.3 (https://standards.ieee.org/ieee/802.3/)"

_CATALOGUE: tuple[Link, ...] = (
    Link(id="nvlink4", name="NVLink 4 (H100/H200)", line_bits_per_s=450 * 8 * _GBIT,
         quoted="900 GB/s total bidirectional per GPU (18 links)",
         source=f"{_H100} and {_H200} (datasheets: 'NVIDIA NVLink: 900GB/s'); halved for one direction"),
    Link(id="nvlink5", name="NVLink 5 (B200)", line_bits_per_s=900 * 8 * _GBIT,
         quoted="1.8 TB/s total bidirectional per GPU (18 links)",
         source="https://www.nvidia.com/en-us/data-center/nvlink/ (fifth-generation NVLink: 1.8 TB/s "
                "bidirectional per GPU); halved for one direction"),
    Link(id="ib-ndr", name="InfiniBand NDR (400 Gb/s)", line_bits_per_s=400 * _GBIT,
         quoted="NDR 400Gb/s per port",
         source=f"NVIDIA ConnectX-7 user manual, {_CX7} ('Single-port OSFP: NDR 400Gb/s and 400GbE')"),
    Link(id="ib-xdr", name="InfiniBand XDR (800 Gb/s)", line_bits_per_s=800 * _GBIT,
         quoted="800 Gb/s per SuperNIC",
         source=f"NVIDIA ConnectX-8 SuperNIC user manual, {_CX8} ('InfiniBand and Ethernet networking "
                "at up to 800 gigabits per second')"),
    Link(id="roce-400", name="RoCE 400GbE", line_bits_per_s=400 * _GBIT,
         quoted="400GbE per port",
         source=f"NVIDIA ConnectX-7 user manual, {_CX7} (400GbE, RoCE); {_ETH} 400GBASE data rate"),
    Link(id="eth-100", name="Ethernet 100GbE", line_bits_per_s=100 * _GBIT,
         quoted="100 Gb/s per port", source=f"{_ETH} 100GBASE data rate (MAC rate)"),
    Link(id="eth-25", name="Ethernet 25GbE", line_bits_per_s=25 * _GBIT,
         quoted="25 Gb/s per port", source=f"{_ETH} 25GBASE data rate (MAC rate)"),
    Link(id="pcie4-x16", name="PCIe Gen4 x16", line_bits_per_s=16 * 16 * _GBIT, payload_bits=128, line_bits=130,
         quoted="16 GT/s per lane, 16 lanes, 128b/130b",
         source=f"PCI Express Base Specification 4.0 (PCI-SIG, {_PCIE}); NVIDIA's A100 datasheet rounds it "
                "to 'PCIe Gen4: 64GB/s' both ways",
         note="31.5 GB/s per direction after encoding; vendors round to 32"),
    Link(id="pcie5-x16", name="PCIe Gen5 x16", line_bits_per_s=32 * 16 * _GBIT, payload_bits=128, line_bits=130,
         quoted="32 GT/s per lane, 16 lanes, 128b/130b",
         source=f"PCI Express Base Specification 5.0 (PCI-SIG, {_PCIE}); {_H100} rounds it to "
                "'PCIe Gen5: 128GB/s' both ways",
         note="63.0 GB/s per direction after encoding; vendors round to 64"),
)

LINK_IDS: tuple[str, ...] = tuple(link.id for link in _CATALOGUE)


def links() -> tuple[Link, ...]:
    """The catalogue, fastest scale-up links first."""
    return _CATALOGUE


def get_link(link_id: str) -> Link:
    """The link with this id (case-insensitive); :class:`InputError` on ``"link"`` otherwise."""
    key = link_id.lower() if isinstance(link_id, str) else link_id
    for link in _CATALOGUE:
        if link.id == key:
            return link
    raise InputError("link", f"unknown link {shown(link_id)}; choose one of {', '.join(LINK_IDS)}")
