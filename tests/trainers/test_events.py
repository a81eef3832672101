"""The event files' one reader (whole file and incremental tail) and the atomic JSON writer."""
import json

import pytest

from trainers.events import (EventLog, atomic_write_json, atomic_write_text, read_events, superseded_dropped,
                             tail_events)


def test_tail_reads_on_from_its_offset_and_waits_for_a_half_written_line(tmp_path):
    log = EventLog(tmp_path, "learner")
    log.write("update", version=1)
    rows, offset = tail_events(log.path)
    assert [r["version"] for r in rows] == [1] and offset == log.path.stat().st_size
    log.write("update", version=2)
    with log.path.open("a") as fh:
        fh.write('{"kind": "update", "vers')                 # the writer is mid-line
    rows, offset = tail_events(log.path, offset)
    assert [r["version"] for r in rows] == [2]
    with log.path.open("a") as fh:
        fh.write('ion": 3}\n')                               # ... and finishes it
    rows, offset = tail_events(log.path, offset)
    assert [r["version"] for r in rows] == [3] and offset == log.path.stat().st_size
    assert tail_events(log.path, offset) == ([], offset)
    log.close()


def test_full_read_skips_a_torn_last_line_and_equals_the_tail_from_zero(tmp_path):
    path = tmp_path / "events-w1.jsonl"
    path.write_text('{"kind": "start"}\nnot json\n{"kind": "update", "version": 1}\n{"kind": "upd')
    assert read_events(path) == [{"kind": "start"}, {"kind": "update", "version": 1}]
    assert tail_events(path)[0] == read_events(path)


def test_a_file_not_created_yet_has_no_rows_for_tail_but_is_an_error_for_a_full_read(tmp_path):
    assert tail_events(tmp_path / "events-w9.jsonl", 0) == ([], 0)
    with pytest.raises(FileNotFoundError):
        read_events(tmp_path / "events-w9.jsonl")


def test_atomic_writes_replace_the_file_and_leave_no_temp_file(tmp_path):
    path = atomic_write_json(tmp_path / "meta.json", {"b": 1, "a": [1, 2]})
    assert json.loads(path.read_text()) == {"a": [1, 2], "b": 1}
    atomic_write_json(path, {"status": "complete"})
    assert json.loads(path.read_text()) == {"status": "complete"}
    atomic_write_text(tmp_path / "learner.addr", "127.0.0.1:5000\n")
    assert (tmp_path / "learner.addr").read_text() == "127.0.0.1:5000\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["learner.addr", "meta.json"]


def test_a_resumed_life_supersedes_the_update_rows_past_its_snapshot():
    """Killed after version 3, resumed from the snapshot at 2: version 3 is the second life's."""
    rows = [{"kind": "start"}, *({"kind": "update", "version": v, "life": 1} for v in (1, 2, 3)),
            {"kind": "resumed", "version": 2}, *({"kind": "update", "version": v, "life": 2} for v in (3, 4))]
    kept = [(r["version"], r["life"]) for r in superseded_dropped(rows) if r["kind"] == "update"]
    assert kept == [(1, 1), (2, 1), (3, 2), (4, 2)]
    never_resumed = rows[:4]
    assert superseded_dropped(never_resumed) == never_resumed
