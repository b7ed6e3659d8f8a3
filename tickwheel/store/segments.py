"""Protocol v5's segments, framed with a table instead of bit by bit.

Every CQL frame on a v5 connection travels in a segment: a 3-byte header (payload length, self-contained flag)
with its CRC-24, the payload, its CRC-32. The driver frames and checks them in Python, its CRC-24 a loop of 24
shifts per header, twice per request (out and back): ~15 % of a direct request's time under cProfile (the
prepared insert of `benchmarks/request_path.py`; BENCHMARKS.md "The driver's request path"). This codec is the
driver's, the same bytes, with a byte-wise table CRC-24 and each header (a length and a flag: few distinct values)
framed once. Compressed segments (the store sends none) stay the driver's.
"""

from __future__ import annotations

import functools
import struct
import zlib
from typing import Any

from cassandra.segment import (
    CRC24_INIT,
    CRC24_POLY,
    CRC32_INITIAL,
    CrcException,
    Segment,
    SegmentCodec,
    SegmentHeader,
)

_SELF_CONTAINED = 1 << 17
_PAYLOAD_MASK = Segment.MAX_PAYLOAD_LENGTH
_UINT32_LE = struct.Struct("<I")


def _table_entry(index: int) -> int:
    crc = index << 16
    for _ in range(8):
        crc <<= 1
        if crc & 0x1000000:
            crc ^= CRC24_POLY
    return crc


_CRC24_TABLE = tuple(_table_entry(i) for i in range(256))


def crc24(value: int, length: int) -> int:
    """The CRC-24 of the `length` low bytes of `value`, least significant first (`cassandra.segment.compute_crc24`)."""
    crc: int = CRC24_INIT
    for _ in range(length):
        crc = _CRC24_TABLE[((crc >> 16) ^ value) & 0xFF] ^ ((crc & 0xFFFF) << 8)
        value >>= 8
    return crc


@functools.lru_cache(maxsize=4096)
def _framed_header(header: int) -> bytes:
    """An uncompressed segment's header and its CRC-24, as sent."""
    return header.to_bytes(3, "little") + crc24(header, 3).to_bytes(3, "little")


class UncompressedSegments(SegmentCodec):  # type: ignore[misc]  # the driver is untyped
    """The driver's segment codec without compression, framing with `crc24` and cached headers."""

    def encode(self, buffer: Any, msg: bytes) -> None:
        """`msg` as one self-contained segment (several, as the driver splits them, past the maximum payload)."""
        length = len(msg)
        if length > _PAYLOAD_MASK:
            super().encode(buffer, msg)
            return
        buffer.write(_framed_header(length | _SELF_CONTAINED))
        buffer.write(msg)
        buffer.write(_UINT32_LE.pack(zlib.crc32(msg, CRC32_INITIAL)))

    def encode_header(
        self, buffer: Any, payload_length: int, uncompressed_length: int, is_self_contained: bool
    ) -> None:
        """A header of a segment the driver splits (payload past the maximum)."""
        buffer.write(_framed_header(payload_length | (_SELF_CONTAINED if is_self_contained else 0)))

    def decode_header(self, buffer: Any) -> SegmentHeader:
        """The next segment's header, its CRC-24 checked."""
        framed = buffer.read(6)
        header = int.from_bytes(framed[:3], "little")
        if _framed_header(header) != framed:
            received = int.from_bytes(framed[3:], "little")
            raise CrcException(
                f"CRC mismatch on header {header:x}. Received {received:x}, computed {crc24(header, 3):x}."
            )
        return SegmentHeader(header & _PAYLOAD_MASK, -1, bool(header & _SELF_CONTAINED))

    def decode(self, buffer: Any, header: SegmentHeader) -> Segment:
        """The segment `header` announced, its CRC-32 checked."""
        payload = buffer.read(header.payload_length)
        (received,) = _UINT32_LE.unpack(buffer.read(4))
        computed = zlib.crc32(payload, CRC32_INITIAL)
        if computed != received:
            raise CrcException(f"CRC mismatch on payload. Received {received:x}, computed {computed:x}.")
        return Segment(payload, header.is_self_contained)


UNCOMPRESSED_SEGMENTS = UncompressedSegments()
