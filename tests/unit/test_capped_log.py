"""The attempt log's writer: the head as it comes, a notice naming the cap, the dropped count, the tail."""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path

from sparkdispatch.storage.attempt_logs import read_attempt_log
from sparkdispatch.storage.capped_log import OPTION, CappedLog

KIB = 1024


def numbered(lines: int) -> bytes:
    return b"".join(b"line %06d\n" % n for n in range(lines))  # 12 bytes each


def test_a_log_under_its_cap_is_written_whole_without_notice(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    log = CappedLog(open(path, "ab"), max_size=16 * KIB)
    data = numbered(1000)  # 12,000 bytes: within the head of 12 KiB
    for start in range(0, len(data), 100):
        log.write(data[start : start + 100])
    log.close()
    assert path.read_bytes() == data and log.dropped == 0


def test_past_its_cap_a_log_keeps_the_head_a_notice_the_dropped_count_and_the_tail(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    log = CappedLog(open(path, "ab"), max_size=16 * KIB)
    data = numbered(10_000)  # 120,000 bytes
    for start in range(0, len(data), 4096):
        log.write(data[start : start + 4096])
    head = path.read_bytes()  # what a live reader sees before the attempt ends
    assert head.startswith(data[: 12 * KIB]) and head.endswith(b"(the cap, " + OPTION.encode() + b", is 16kb)\n")
    log.close()

    text = path.read_bytes()
    dropped = len(data) - 12 * KIB - 4 * KIB
    assert log.dropped == dropped
    notice = (
        f"[sparkdispatch] {dropped} bytes of this attempt's output were dropped ({OPTION} is 16kb); "
        f"its last {4 * KIB} bytes follow\n"
    ).encode()
    assert text == head + notice + data[-4 * KIB :]
    assert text.endswith(b"line 009999\n")
    assert len(text) < 16 * KIB + 400


def test_a_log_filled_to_the_byte_says_so_at_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    log = CappedLog(open(path, "ab"), max_size=4 * KIB)
    log.write(b"x" * (3 * KIB))
    assert b"[sparkdispatch]" not in path.read_bytes()
    log.write(b"y")
    log.close()
    assert b"reached 3kb" in path.read_bytes() and path.read_bytes().endswith(
        b"0 bytes of this attempt's output were dropped (" + OPTION.encode() + b" is 4kb); its last 1 bytes follow\ny"
    )


class FullDisk(io.BytesIO):
    """A file on a disk that filled up after `room` bytes."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def write(self, data: bytes) -> int:  # type: ignore[override]
        if self.tell() + len(data) > self.room:
            raise OSError(28, "No space left on device")
        return super().write(data)


def test_the_pump_drains_its_pipe_to_the_end_even_when_the_disk_is_full() -> None:
    full = FullDisk(room=1000)
    log = CappedLog(full, max_size=1 << 20)
    read_end, write_end = os.pipe()
    pump = threading.Thread(target=log.copy_from, args=(read_end,))
    pump.start()
    data = numbered(200_000)  # 2.4 MB, far more than a pipe holds: the writer would block if nobody read
    written = os.write(write_end, data[: 1 << 16])
    with os.fdopen(write_end, "wb") as pipe:
        pipe.write(data[written:])
    pump.join(30)
    assert not pump.is_alive() and full.closed


def test_the_log_route_reader_sees_the_notices(tmp_path: Path) -> None:
    logs = tmp_path / "results" / ("ab" * 16) / "v" / "_logs"
    logs.mkdir(parents=True)
    log = CappedLog(open(logs / "0-0-exec1.log", "ab"), max_size=8 * KIB)
    log.write(numbered(2000))
    log.close()
    read = read_attempt_log(str(tmp_path / "results"), "ab" * 16, "v", 0, None)
    assert read is not None and read.text.startswith("line 000000\n") and read.text.endswith("line 001999\n")
    held = read.text.index(f"the cap, {OPTION}, is 8kb")
    assert 6 * KIB < held < read.text.index("bytes of this attempt's output were dropped")
