"""The byte ledger (tables.ledger_columns, ledger.section) and the cost-model section (ledger.model_section)
on hand-made rows and files: the arithmetic, not a run."""
import json

import pandas as pd
import pytest

from harness.results import files, ledger, tables


def _links():
    # two workers sampled at t = 10, 11, 12 s; w1's uplink carries 1000 B/s, w2's 3000 B/s; downlinks 10x
    rows = []
    for t in (10.0, 11.0, 12.0):
        for node, up in (("w1", 1000), ("w2", 3000), ("learner", 99999)):
            rows += [{"t_s": t, "node": node, "direction": "up", "bytes": up * (t - 10)},
                     {"t_s": t, "node": node, "direction": "down", "bytes": 10 * up * (t - 10)}]
    return pd.DataFrame(rows)


def test_link_bytes_are_the_worker_counters_over_the_update_window_interpolated():
    totals = tables.worker_link_totals(_links())
    row = {"t": 11.5, "seconds_per_update": 1.0,
           "tcp": {"bytes_sent": 900, "bytes_retrans": 100, "total_retrans": 2}}
    rolls = [{"tcp": {"bytes_sent": 300, "bytes_retrans": 0, "total_retrans": 0}},
             {"tcp": {"bytes_sent": 500, "bytes_retrans": 50, "total_retrans": 1}}]
    out = tables.ledger_columns(row, rolls, totals)
    assert out["link_bytes_up"] == pytest.approx(4000)          # (1000 + 3000) B/s x 1 s, learner not counted
    assert out["link_bytes_down"] == pytest.approx(40000)
    assert (out["socket_bytes_down"], out["socket_retrans_bytes_down"], out["socket_retrans_segs_down"]) == (900, 100, 2)
    assert (out["socket_bytes_up"], out["socket_retrans_bytes_up"], out["socket_retrans_segs_up"]) == (800, 50, 1)


def test_ledger_columns_are_empty_without_counters():
    out = tables.ledger_columns({"t": 20.0, "seconds_per_update": 1.0}, [{}], tables.worker_link_totals(_links()))
    assert all(v is None for v in out.values())        # no TCP_INFO rows; the window is past the last sample


def test_the_ledger_section_reconciles_the_layers():
    row = {"run_id": "r", "variant": "spar@1.6%", "payload_bytes_down": 956, "wire_bytes_down": 2000,
           "payload_bytes_up": 1000, "wire_bytes_up": 1044, "socket_bytes_down": 2100, "socket_bytes_up": 1044,
           "socket_retrans_bytes_down": 100, "socket_retrans_bytes_up": 0, "link_bytes_down": 2600,
           "link_bytes_up": 1300, "seconds_per_update": 1.0}
    led = ledger.ledger_rows(pd.DataFrame([row, row]))
    r = led.iloc[0]
    assert (r["payload"], r["frames"], r["socket"], r["retrans"], r["link"], r["updates"]) == (2912, 3044, 3144, 100, 3900, 2)
    text = "\n".join(ledger.section(pd.DataFrame([row])))
    # overhead 3900 / 2912 - 1 = 33.9 %: framing 132 (4.5 %), retransmissions 100 (3.4 %), headers + ACKs 756 (26.0 %)
    assert "| 33.9 % | 4.5 % | 3.4 % | 26.0 % | 0.0 % |" in text
    assert "| 0.1 (3.2 %) |" in text                   # retransmitted kB and share of the socket bytes


def test_updates_shorter_than_the_counter_sampling_leave_the_link_columns_empty_and_say_why():
    """Updates of 0.1 s between link samples 0.5 s apart: each update's window holds a share of its
    neighbours' bytes, and a 3-update run read link bytes below the payload (overhead -25 %)."""
    row = {"run_id": "r", "variant": "full-bf16", "payload_bytes_down": 40000, "wire_bytes_down": 80088,
           "payload_bytes_up": 7000, "wire_bytes_up": 7900, "socket_bytes_down": 80500, "socket_bytes_up": 8000,
           "socket_retrans_bytes_down": 0, "socket_retrans_bytes_up": 0, "link_bytes_down": 31000,
           "link_bytes_up": 4000, "seconds_per_update": 0.1}
    text = "\n".join(ledger.section(pd.DataFrame([row] * 3)))
    [line] = [ln for ln in text.splitlines() if ln.startswith("| r | full-bf16 |")]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[7] == cells[8] == cells[11] == "-"          # link kB, overhead, headers + ACKs
    assert cells[3] == "87.0" and cells[9] == "1.1 %"          # payload and framing, which need no counter, stay
    assert "shorter than the link counters' 0.5 s sampling" in text


def test_no_ledger_without_the_columns():
    assert ledger.section(pd.DataFrame([{"run_id": "r", "variant": "full"}])) == []


def _run(tmp_path, doc):
    (tmp_path / "prediction.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return tables.Run(dir=tmp_path, config={}, meta={})


def test_model_section_names_each_bottleneck_and_the_error(tmp_path):
    doc = {"workers": 8, "cores": 2, "link": "profile paper-62.5mbit", "cc": "cubic", "model": "m",
           "variants": {"spar@1.6%": {"predicted_s": 2.2, "measured_s": 2.0, "error": 0.1,
                                      "bottleneck": "CPU oversubscription", "evidence": "8 workers share 2 cores"}}}
    text = "\n".join(ledger.model_section([_run(tmp_path, doc)]))
    assert "| spar@1.6% | 2.200 | 2.000 | +10.0% | CPU oversubscription |" in text
    assert "CPU oversubscription: 8 workers share 2 cores." in text


def test_a_malformed_prediction_names_the_file(tmp_path):
    with pytest.raises(files.ResultsError, match="prediction.json"):
        ledger.model_section([_run(tmp_path, "{not json")])
