"""The wire format: header layout, splitting, and frames that cannot be trusted."""

from __future__ import annotations

import os
import struct

import pytest

from pipepool import FrameError
from pipepool.frames import HEADER_SIZE, MAGIC, Kind, encode_header, split_frames

pytestmark = pytest.mark.smoke


def frame(kind: int, ident: int, payload: bytes) -> bytes:
    return encode_header(kind, ident, len(payload)) + payload


def test_header_layout_is_documented_little_endian():
    header = encode_header(Kind.DONE, 0x0102030405060708, 0x0A0B0C0D)
    assert len(header) == HEADER_SIZE == 16
    assert header == struct.pack("<BBHIQ", MAGIC, 3, 0, 0x0A0B0C0D, 0x0102030405060708)


def test_split_keeps_partial_tail():
    data = frame(Kind.DONE, 1, b"abc") + frame(Kind.REVOKED, 2, b"") + frame(Kind.DONE, 3, b"xyz")
    buf = bytearray(data[:-2])
    out: list = []
    split_frames(buf, out)
    assert out == [(3, 1, b"abc"), (7, 2, b"")]
    buf += data[-2:]
    split_frames(buf, out)
    assert out[-1] == (3, 3, b"xyz") and buf == b""


@pytest.mark.parametrize(
    "header",
    [
        struct.pack("<BBHIQ", 0x00, 3, 0, 4, 1),  # wrong magic
        struct.pack("<BBHIQ", MAGIC, 3, 1, 4, 1),  # reserved flags set
        struct.pack("<BBHIQ", MAGIC, 3, 0, 1 << 31, 1),  # beyond the reader's limit
    ],
    ids=["magic", "flags", "length"],
)
def test_untrusted_header_is_an_error_not_an_allocation(header):
    buf = bytearray(frame(Kind.DONE, 7, b"ok") + header)
    out: list = []
    with pytest.raises(FrameError):
        split_frames(buf, out, max_payload=1 << 20)
    assert out == [(3, 7, b"ok")]  # what came before the bad header is kept


def test_encode_refuses_what_the_header_cannot_say():
    with pytest.raises(FrameError):
        encode_header(Kind.DONE, 1, 1 << 32)


def test_frame_reader_reads_across_chunks_and_reports_eof_mid_frame(loop_module):
    r, w = os.pipe()
    try:
        reader = loop_module.FrameReader(r)
        os.write(w, frame(Kind.TASK, 1, b"a" * 10) + frame(Kind.TASK, 2, b"b" * 5)[:7])
        assert reader.read() == (1, 1, b"a" * 10)
        assert not reader.buffered()
        os.write(w, frame(Kind.TASK, 2, b"b" * 5)[7:] + frame(Kind.TASK, 3, b"")[:3])
        assert reader.read() == (1, 2, b"b" * 5)
        os.close(w)
        w = -1
        with pytest.raises(FrameError):
            reader.read()
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_frame_reader_clean_eof(loop_module):
    r, w = os.pipe()
    os.write(w, frame(Kind.TASK, 9, b"x"))
    os.close(w)
    reader = loop_module.FrameReader(r)
    assert reader.read() == (1, 9, b"x")
    assert reader.read() is None
    os.close(r)
