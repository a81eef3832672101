"""Two report sections: the byte ledger (payload vs socket vs link bytes per update) and the cost
model's prediction for each variant with the variant's bottleneck in words.

Ledger, per (run, variant), mean bytes per update over the updates whose three layers were all
recorded (tables.ledger_columns): payload = update bodies to every worker + rollout bodies;
frames = what the harness wrote (payload + 44-byte frame headers); socket = the TCP data bytes the
kernel sent (TCP_INFO bytes_sent, retransmissions included) and retransmitted bytes; link = what
the worker links carried (interface counters: IP/TCP/Ethernet headers, ACKs, retransmissions).
overhead = (link - payload) / payload = framing + retransmissions + headers and ACKs (the rest,
link - socket; what the split leaves is shown as the residual: the up direction's TCP counters are
taken at the workers' rollout rows, shifted by up to one update).

Model: read from the run's ``prediction.json`` (harness/projection/prediction.py, written when the
run finished; this room never imports the projection room).
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from harness.results.files import ResultsError
from harness.results.tables import Run
from harness.results.compare import FRAME_HEADER_BYTES   # trainers/protocol/wire.py HEADER_BYTES

PREDICTION_FILE = "prediction.json"
LEDGER = ("payload", "frames", "socket", "retrans", "link")
# The link counters' sampling interval (s): harness/run/launch.py samples every worker link this often
# (LinkSampler(interval_s=0.5)); an update's link bytes are interpolated between samples, so updates
# shorter than this cannot be attributed one by one.
LINK_SAMPLE_S = 0.5


def _md(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def ledger_rows(updates: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, variant): mean bytes per update of each ledger layer (see the docstring)."""
    need = {"socket_bytes_down", "socket_bytes_up", "link_bytes_down", "link_bytes_up"}
    if updates.empty or not need <= set(updates):
        return pd.DataFrame()
    df = updates.dropna(subset=sorted(need))
    if df.empty:
        return pd.DataFrame()
    copies = (df["wire_bytes_down"] / (df["payload_bytes_down"] + FRAME_HEADER_BYTES)).round()
    layers = pd.DataFrame({
        "run_id": df["run_id"], "variant": df["variant"],
        "payload": df["payload_bytes_down"] * copies + df["payload_bytes_up"],
        "frames": df["wire_bytes_down"] + df["wire_bytes_up"],
        "socket": df["socket_bytes_down"] + df["socket_bytes_up"],
        "retrans": df["socket_retrans_bytes_down"].fillna(0) + df["socket_retrans_bytes_up"].fillna(0),
        "link": df["link_bytes_down"] + df["link_bytes_up"]})
    out = layers.groupby(["run_id", "variant"], sort=False).mean().reset_index()
    out["updates"] = layers.groupby(["run_id", "variant"], sort=False).size().to_numpy()
    out["s_per_update"] = df.groupby(["run_id", "variant"], sort=False)["seconds_per_update"].median().to_numpy()
    return out


def section(updates: pd.DataFrame) -> list[str]:
    """The "Byte ledger" section; [] when no update recorded its socket and link bytes."""
    led = ledger_rows(updates)
    if led.empty:
        return []
    kb = lambda v: f"{v / 1e3:,.1f}"     # noqa: E731  (bytes -> kB)
    pct = lambda v, of: f"{100 * v / of:.1f} %" if of else "-"     # noqa: E731
    head = ["run", "method", "updates", "payload kB", "frames kB", "socket kB", "retrans kB (of socket)",
            "link kB", "overhead vs payload", "framing", "retransmissions", "headers + ACKs", "residual"]
    rows, notes = [], []
    for _, r in led.iterrows():
        framing, hdr = r["frames"] - r["payload"], r["link"] - r["socket"]
        residual = r["socket"] - r["frames"] - r["retrans"]
        link_ok = r["s_per_update"] >= LINK_SAMPLE_S
        if not link_ok:
            notes.append(f"- `{r['run_id']}` {r['variant']}: its updates (median {r['s_per_update']:.3f} s) are "
                         f"shorter than the link counters' {LINK_SAMPLE_S:g} s sampling, so the link bytes of one "
                         "update cannot be told from its neighbours' (they read below the payload): the link "
                         "columns are left empty. The main table's link bytes per update (the cell's total over its "
                         "updates) still hold.")
        link = (lambda v: v) if link_ok else (lambda v: "-")  # noqa: E731
        rows.append([str(r["run_id"]), str(r["variant"]), str(int(r["updates"])), kb(r["payload"]), kb(r["frames"]),
                     kb(r["socket"]), f"{kb(r['retrans'])} ({pct(r['retrans'], r['socket'])})", link(kb(r["link"])),
                     link(pct(r["link"] - r["payload"], r["payload"])), pct(framing, r["payload"]),
                     pct(r["retrans"], r["payload"]), link(pct(hdr, r["payload"])), pct(residual, r["payload"])])
    return ["## Byte ledger", "",
            "Mean bytes per update, both directions, all workers: payload (message bodies), frames (what the harness "
            "wrote: + frame headers), socket (TCP data bytes the kernel sent, TCP_INFO bytes_sent: retransmissions "
            "included), link (what the worker links carried: + IP/TCP/Ethernet headers and ACKs). Overhead vs "
            "payload = framing + retransmissions + headers and ACKs (+ the residual: the up direction's socket "
            "counters are read at the workers' rollout rows, up to one update late).", "", _md(head, rows), "",
            *([*notes, ""] if notes else [])]


def read_prediction(run: Run) -> dict:
    path = Path(run.dir) / PREDICTION_FILE
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ResultsError(f"{path}: not a JSON document ({err})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("variants", {}), dict):
        raise ResultsError(f"{path}: expected an object with a 'variants' object")
    problem = _prediction_problem(doc)
    if problem:
        raise ResultsError(f"{path}: {problem}")
    return doc


def _number(v, optional: bool = False) -> bool:
    return (v is None and optional) or (isinstance(v, (int, float)) and not isinstance(v, bool))


VARIANT_NUMBERS = ("predicted_s", "measured_s", "error")
REGIME_NUMBERS = ("compute_s", "paper_ratio", "paper_share")                      # always there
REGIME_OPTIONAL = ("ratio", "share", "link_s", "target_ratio", "rate_bit_s", "paper_rate_bit_s")


def _prediction_problem(doc: dict) -> str | None:
    """What in a prediction.json the report cannot read (the field named), or None: each variant's
    numbers and words, the regime block's numbers, curve and paper points, the data-parallel bytes."""
    for variant, v in doc.get("variants", {}).items():
        if not isinstance(v, dict) or not all(_number(v.get(k)) for k in VARIANT_NUMBERS) \
                or not all(isinstance(v.get(k), str) for k in ("bottleneck", "evidence")):
            return f"variants.{variant}: expected numbers {', '.join(VARIANT_NUMBERS)} and words bottleneck, evidence"
    dp = doc.get("dataparallel", {})
    if not isinstance(dp, dict) or not all(isinstance(v, dict) and all(_number(x) for x in v.values())
                                           for v in dp.values()):
        return "dataparallel: expected an object of methods, each an object of numbers"
    if "dataparallel" in doc and not isinstance(doc.get("dataparallel_note"), str):
        return "dataparallel_note: expected words beside the data-parallel bytes"
    return _regime_problem(doc.get("regime", {}))


def _regime_problem(reg) -> str | None:
    if not isinstance(reg, dict):
        return "regime: expected an object"
    if not reg:
        return None
    bad = [k for k in REGIME_NUMBERS if not _number(reg.get(k))] + \
          [k for k in REGIME_OPTIONAL if not _number(reg.get(k), optional=True)]
    if bad:
        return f"regime.{bad[0]}: expected a number"
    if not isinstance(reg.get("placed", {}), dict):
        return "regime.placed: expected an object"
    curve, points = reg.get("curve", []), reg.get("paper_points", [])
    if not isinstance(curve, list) or not all(
            isinstance(c, dict) and _number(c.get("ratio")) and isinstance(c.get("speedup"), dict)
            and all(_number(x) for x in c["speedup"].values()) for c in curve):
        return "regime.curve: expected a list of {ratio, speedup: {variant: number}}"
    if not isinstance(points, list) or not all(
            isinstance(p, dict) and all(_number(p.get(k)) for k in ("pipeline", "full_s", "method_s")) for p in points):
        return "regime.paper_points: expected a list of {pipeline, full_s, method_s}"
    return None


def model_section(runs: list[Run]) -> list[str]:
    """"Cost model vs measured": each variant's predicted and measured seconds per update, the error,
    and its bottleneck with the evidence in words; [] when no run has a prediction.json."""
    head = ["run", "method", "predicted s/update", "measured s/update", "error", "bottleneck"]
    rows, words, dp = [], [], []
    for run in runs:
        doc = read_prediction(run)
        for variant, v in doc.get("variants", {}).items():
            rows.append([run.dir.name, variant, f"{v['predicted_s']:.3f}", f"{v['measured_s']:.3f}",
                         f"{v['error']:+.1%}", v["bottleneck"]])
            words.append(f"- `{run.dir.name}` **{variant}**: {v['bottleneck']}: {v['evidence']}.")
        if doc.get("variants"):
            words.append(f"- `{run.dir.name}`: {doc.get('workers')} workers on {doc.get('cores')} cores, "
                         f"{doc.get('link')}, congestion control {doc.get('cc')}; {doc.get('model')}.")
        dp += dp_rows(run.dir.name, doc)
    out = []
    if rows:
        out += ["## Cost model vs measured", "",
                "The cost model's seconds per update for each method at this run's link and with its compute "
                "measured here (`prediction.json`; `harness project --from RUN` is the same model at other scales), "
                "the measured median after the first update, and what bounds each cell.", "", _md(head, rows), "",
                *words, ""]
    return out + dp_section(dp, runs)


def dp_rows(run: str, doc: dict) -> list[list[str]]:
    """A run's data-parallel variants in prediction.json: the byte rules' bytes per step beside the run's."""
    b = lambda v: f"{v:,.0f}"   # noqa: E731
    return [[run, method, b(v["bytes_up_per_step"]), b(v["claimed_up_per_step"]), b(v["payload_up_per_step"]),
             b(v["bytes_down_per_step"]), b(v["claimed_down_per_step"]), b(v["payload_down_per_step"])]
            for method, v in doc.get("dataparallel", {}).items()]


def dp_section(rows: list[list[str]], runs: list[Run]) -> list[str]:
    if not rows:
        return []
    note = next(d["dataparallel_note"] for d in map(read_prediction, runs) if d.get("dataparallel_note"))
    head = ["run", "method", "model B/step up", "claimed up", "measured payload up", "model B/step down",
            "claimed down", "measured payload down"]
    return ["## Cost model vs measured: data-parallel bytes", "",
            f"The cost model's bytes per optimizer step per worker (tensor data, fp32, over whole sync windows) for "
            f"each data-parallel method at this run's model and settings, beside the method's own claimed bytes and "
            f"the measured SYNC payload (its tensor table's header included) over the same steps. The model gives "
            f"{note}.", "", _md(head, rows), ""]
