"""The shared reading layer: blocks of whole lines, and blocks scanned ahead in threads."""

import gzip
import threading

import pytest

from daemon.ingest.formats.reader import decode_lines, iter_byte_blocks, scanned_ahead

LINES = [f"line {i} " + "x" * (i % 37) for i in range(400)] + ["ünïcode and a long one " + "y" * 300]


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("read_bytes", [7, 64, 1 << 20])
def test_blocks_are_whole_lines_numbered_and_kept_as_read(tmp_path, suffix, read_bytes):
    text = "\n".join(LINES) + "\n"
    p = tmp_path / f"a.txt{suffix}"
    p.write_bytes(gzip.compress(text.encode()) if suffix else text.encode())
    blocks = list(iter_byte_blocks(p, read_bytes))  # every block kept until the end: none may change under another
    got, numbers = [], []
    for first, block in blocks:
        lines = decode_lines(block)
        numbers += range(first, first + len(lines))
        got += lines
    assert got == LINES
    assert numbers == list(range(1, len(LINES) + 1))


def test_last_line_without_newline_is_read(tmp_path):
    p = tmp_path / "a.txt"
    p.write_bytes(b"one\ntwo\nthree")
    assert [line for _, block in iter_byte_blocks(p, 5) for line in decode_lines(block)] == ["one", "two", "three"]


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_scanned_ahead_keeps_order_and_results(threads):
    blocks = [(10 * i + 1, bytes([65 + i % 26]) * (i + 1)) for i in range(50)]
    seen_threads = set()

    def scan(raw: bytes) -> int:
        seen_threads.add(threading.current_thread().name)
        return len(raw)

    out = list(scanned_ahead(iter(blocks), scan, threads))
    assert out == [(first, raw, len(raw)) for first, raw in blocks]
    assert any(name.startswith("raswarden-scan") for name in seen_threads) == (threads > 1)


def test_scanned_ahead_raises_what_a_scan_raised():
    def scan(raw: bytes) -> int:
        if raw == b"bad":
            raise ValueError("bad block")
        return 1

    gen = scanned_ahead(iter([(1, b"a"), (2, b"bad"), (3, b"c")]), scan, 2)
    assert next(gen) == (1, b"a", 1)
    with pytest.raises(ValueError, match="bad block"):
        list(gen)
