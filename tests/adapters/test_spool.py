"""The ingest spool: durable appends, reading by offset, release of committed segments."""

from __future__ import annotations

from pathlib import Path

import pytest

from capwatch.adapters.io.spool import Spool, SpoolFull, SpoolSource


def _drain(source: SpoolSource) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    while records := source.poll(0.01):
        out.extend((r.offset, r.value) for r in records)
    return out


def _start(source: SpoolSource, resume: int = 0) -> None:
    source.start(lambda p: None, lambda p: None, {0: resume})


def test_events_are_read_back_in_order_across_segments(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=64)
    for i in range(10):
        assert spool.append([b'{"n":%d}' % i, b'{"m":%d}' % i]) == 2 * i
    assert len(spool.segments()) > 2
    source = SpoolSource(spool)
    _start(source, resume=5)
    got = _drain(source)
    assert [o for o, _ in got] == list(range(5, 20))
    assert got[0][1] == b'{"m":2}'
    spool.append([b'{"late":1}'])
    assert _drain(source) == [(20, b'{"late":1}')]
    assert source.lag() == {0: 0}


def test_commit_releases_whole_segments_and_a_restart_resumes(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=64)
    for i in range(10):
        spool.append([b'{"n":%d}' % i])
    source = SpoolSource(spool)
    _start(source)
    _drain(source)
    before = spool.size
    source.commit({0: 9})
    first = spool.segments()[0][0]
    assert 0 < first <= 9 and spool.size < before
    source.close()
    again = Spool(tmp_path, segment_bytes=64)
    assert again.end == 10
    reader = SpoolSource(again)
    _start(reader, resume=0)  # what was released was committed: start at the oldest kept
    assert [o for o, _ in _drain(reader)] == list(range(first, 10))


def test_a_torn_last_line_is_dropped_at_start(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append([b'{"a":1}', b'{"a":2}'])
    spool.close()
    [(_, path)] = spool.segments()
    with open(path, "ab") as f:
        f.write(b'{"a":3')  # a crash mid-append: never acknowledged
    again = Spool(tmp_path)
    assert again.end == 2
    again.append([b'{"a":4}'])
    reader = SpoolSource(again)
    _start(reader)
    assert _drain(reader) == [(0, b'{"a":1}'), (1, b'{"a":2}'), (2, b'{"a":4}')]


def test_a_full_spool_refuses_appends(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=30)
    spool.append([b"x" * 20])
    with pytest.raises(SpoolFull, match="limit is 30"):
        spool.append([b"y" * 20])
    with pytest.raises(ValueError, match="single lines"):
        spool.append([b"a\nb"])
    assert spool.end == 1


_FILE_SIZE_LIMITED_APPEND = r"""
import json, resource, signal, sys
from capwatch.adapters.io.spool import Spool, SpoolSource
spool = Spool(sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit, write() fails (EFBIG)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
# Room for part of the batch only: the write stops midway, as on a full disk.
resource.setrlimit(resource.RLIMIT_FSIZE, (spool.size + 30, hard))
try:
    spool.append([b'{"refused":%d}' % i for i in range(5)])
    failed = None
except OSError as e:
    failed = e.errno
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
after = spool.append([b'{"after":1}'])
source = SpoolSource(spool)
source.start(lambda p: None, lambda p: None, {0: 0})
read = [(r.offset, r.value.decode()) for r in source.poll(0.01)]
print(json.dumps({"failed": failed, "after": after, "end": spool.end, "read": read}))
"""


def test_an_append_that_fails_midway_leaves_nothing_of_its_events(tmp_path: Path) -> None:
    # A full disk answered the batch 503 but left its first events and a torn line in the
    # segment: the next accepted batch's first event was glued to the torn line (a dead
    # letter, though answered 200) and every later offset named another event. The file
    # size limit makes the write stop midway for real, in a process of its own.
    import json
    import subprocess
    import sys

    from tests.paths import REPO_ROOT

    spool = Spool(tmp_path)
    spool.append([b'{"n":0}', b'{"n":1}'])
    spool.close()
    done = subprocess.run([sys.executable, "-c", _FILE_SIZE_LIMITED_APPEND, str(tmp_path)],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["failed"] is not None
    expected = [[0, '{"n":0}'], [1, '{"n":1}'], [2, '{"after":1}']]
    assert (result["after"], result["end"], result["read"]) == (2, 3, expected)
    reopened = SpoolSource(Spool(tmp_path))
    _start(reopened)
    assert [[o, v.decode()] for o, v in _drain(reopened)] == expected
