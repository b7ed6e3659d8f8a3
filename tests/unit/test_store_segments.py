"""store.segments frames protocol v5's segments exactly as the driver does, faster."""

from __future__ import annotations

import io
import random

import pytest
from cassandra.segment import CrcException, Segment, SegmentCodec, compute_crc24

from tickwheel.store.segments import UNCOMPRESSED_SEGMENTS, crc24


def test_the_table_crc24_is_the_drivers() -> None:
    rng = random.Random(7)
    for value in [0, 1, 0xFFFFFF, *(rng.randrange(1 << 24) for _ in range(2000))]:
        assert crc24(value, 3) == compute_crc24(value, 3)
    for value in (rng.randrange(1 << 40) for _ in range(200)):
        assert crc24(value, 5) == compute_crc24(value, 5)


@pytest.mark.parametrize("length", [0, 1, 300, 5000, Segment.MAX_PAYLOAD_LENGTH, Segment.MAX_PAYLOAD_LENGTH + 10])
def test_segments_are_the_drivers_bytes_and_decode_back(length: int) -> None:
    payload = random.Random(length).randbytes(length)
    ours, theirs = io.BytesIO(), io.BytesIO()
    UNCOMPRESSED_SEGMENTS.encode(ours, payload)
    SegmentCodec().encode(theirs, payload)
    assert ours.getvalue() == theirs.getvalue()
    framed = io.BytesIO(ours.getvalue())
    decoded = b""
    while framed.tell() < len(ours.getvalue()):
        header = UNCOMPRESSED_SEGMENTS.decode_header(framed)
        decoded += UNCOMPRESSED_SEGMENTS.decode(framed, header).payload
    assert decoded == payload


def test_a_header_whose_crc_does_not_match_is_refused() -> None:
    framed = io.BytesIO()
    UNCOMPRESSED_SEGMENTS.encode(framed, b"frame")
    damaged = bytearray(framed.getvalue())
    damaged[4] ^= 0x01
    with pytest.raises(CrcException):
        UNCOMPRESSED_SEGMENTS.decode_header(io.BytesIO(bytes(damaged)))


def test_a_payload_whose_crc_does_not_match_is_refused() -> None:
    framed = io.BytesIO()
    UNCOMPRESSED_SEGMENTS.encode(framed, b"frame")
    damaged = bytearray(framed.getvalue())
    damaged[7] ^= 0x01
    damaged_frame = io.BytesIO(bytes(damaged))
    header = UNCOMPRESSED_SEGMENTS.decode_header(damaged_frame)
    with pytest.raises(CrcException):
        UNCOMPRESSED_SEGMENTS.decode(damaged_frame, header)
