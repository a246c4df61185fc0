"""The new step and watchdog lines of a running job's driver log, pass after pass.

On the head, by byte offset (the file tui/cluster/driver_log.py finds): one short command reads
the bytes written since the last pass, at most CHUNK_BYTES, ending at a line end, and sends back
only the lines that may matter (grep -F for tui/supervisor/stall.py's LOG_MARKS), each cut to
LINE_BYTES and all of them to OUT_BYTES — a chatty log costs the host a grep, not the link. The
shell text is constant; the path, the numbers and the marks are argv words. Where the file is
not on the head (the job asked for entrypoint resources), the Jobs API's whole log is read and
cut at the character offset of the last pass (bounded by the dashboard client's LOG_CAP).
"""

from __future__ import annotations

from dataclasses import dataclass

from tui.cluster import driver_log
from tui.cluster.dashboard import DashboardClient
from tui.supervisor.stall import LOG_MARKS
from tui.transport.types import Transport

CHUNK_BYTES = 16 << 20  # read per pass at most (a backlog is read over several passes)
LINE_BYTES = 4000
OUT_BYTES = 1 << 20
READ_TIMEOUT_S = 20.0

# $1 file, $2 offset, $3 chunk cap, $4 line cap, $5 output cap; the rest: grep's -e words.
# Prints "OFFSET END SIZE MTIME", then the matching lines of bytes [OFFSET, END). END is a line
# end (a last line still being written waits for the next pass) unless one line fills a whole
# chunk. A file shorter than the offset was replaced: read from 0 again; anything but a regular
# file there now (a FIFO would hold the read) is not read.
_READ = r"""
f=$1; off=$2; cap=$3; lcap=$4; ocap=$5; shift 5
[ -f "$f" ] || exit 4
st=$(stat -L -c '%s %Y' -- "$f") || exit 4
size=${st% *}; mtime=${st#* }
[ "$size" -ge "$off" ] || off=0
end=$size
[ $((end - off)) -le "$cap" ] || end=$((off + cap))
if [ "$end" -gt "$off" ]; then
  lastc=$(tail -c +"$end" -- "$f" | head -c 1 | od -An -tx1 | tr -d ' \n')
  if [ "$lastc" != "0a" ]; then
    part=$(tail -c +$((off + 1)) -- "$f" | head -c $((end - off)) | tail -n 1 | wc -c)
    if [ "$part" -lt $((end - off)) ] || [ $((end - off)) -lt "$cap" ]; then
      end=$((end - part))
    fi
  fi
fi
printf '%s %s %s %s\n' "$off" "$end" "$size" "$mtime"
[ "$end" -gt "$off" ] || exit 0
tail -c +$((off + 1)) -- "$f" | head -c $((end - off)) | grep -a -F "$@" | cut -c 1-"$lcap" \
  | head -c "$ocap"
exit 0
"""


@dataclass
class LogRead:
    """What one pass read: the lines, whether the log's end was reached (no backlog left over
    for later passes), and the file's mtime (no line read was written after it)."""

    lines: list[str]
    caught_up: bool
    mtime: float | None = None


class LogCursor:
    """Where the last pass stopped in one job's driver log."""

    def __init__(self, sid: str) -> None:
        self.sid = sid
        self.log: driver_log.DriverLog | None = None
        self.offset = 0  # bytes of the file (or characters of the Jobs API's text) read
        self.via_api = False

    async def read(self, head: Transport, client: DashboardClient) -> LogRead:
        """The lines since the last pass. TransportError / DashboardError when neither the
        head nor the Jobs API can be asked."""
        if self.log is None and not (self.via_api and self.offset):
            # Not found yet (a driver that has not written) is asked again; once lines were
            # read through the Jobs API its character offsets stay with it.
            self.log = await driver_log.locate(head, self.sid, tail_bytes=1)
            self.via_api = self.log is None
        if self.log is not None:
            got = await self._read_file(head, self.log)
            if got is not None:
                return got
            self.log = None  # gone (a new session): found again next pass
            return LogRead([], caught_up=False)
        text = await client.job_logs(self.sid)
        if len(text) < self.offset:
            self.offset = 0
        new, self.offset = text[self.offset :], len(text)
        cut = new.rfind("\n") + 1  # a last line without its newline waits
        self.offset -= len(new) - cut
        marked = [ln for ln in new[:cut].splitlines() if any(m in ln for m in LOG_MARKS)]
        return LogRead(marked, caught_up=True)

    async def _read_file(self, head: Transport, log: driver_log.DriverLog) -> LogRead | None:
        marks = [w for m in LOG_MARKS for w in ("-e", m)]
        res = await head.run(
            [
                "sh",
                "-c",
                _READ,
                "sh",
                log.path,
                str(self.offset),
                str(CHUNK_BYTES),
                str(LINE_BYTES),
                str(OUT_BYTES),
                *marks,
            ],
            timeout=READ_TIMEOUT_S,
            what=f"read {self.sid}'s driver log",
        )
        if not res.ok:
            return None
        first, _, rest = res.stdout.partition("\n")
        fields = first.split()
        if len(fields) != 4 or not all(f.isdigit() for f in fields):
            return None
        _off, end, size, mtime = (int(f) for f in fields)
        self.offset = end
        # Less than a chunk left: only a line still being written (read next pass).
        return LogRead(rest.splitlines(), caught_up=size - end < CHUNK_BYTES, mtime=float(mtime))
