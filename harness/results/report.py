"""Comparison report: compare.py's table as markdown + HTML, with the runs and their cells.

    harness report results/<run-id>          -> results/<run-id>/report.md (+ report.html)
    harness report results/<sweep-id>        -> one table over every grid point of the sweep

Per (link coordinates, method): seconds per update (median [IQR]), speedup vs the run's
`--baseline` (default `full-bf16`), payload and wire bytes per update, % of the baseline's, link
bytes per update, held-out quality (final, mean ± 95 % CI over seeds) next to the training-batch
metric, pipelining depth and policy lag (median / max), consistency (every replica's final hash
equal to the learner's), completeness; then held-out quality and time to quality (pass@1, pass@k,
the objective's metric; seconds and updates to the baseline-derived target; speedup to quality
next to speedup per update, and a line for every method whose per-update speedup does not carry
over); then one line per run (status, git, kernel, versions, the errors
its samplers recorded), one per cell (status, updates, fewest workers, what happened to its
workers; a planned cell the run never reached too, "not started" and why), and one per degraded
cell (which worker was lost at which version, how many remained).
Numbers come from compare.py; this module only formats them.
"""
from __future__ import annotations

import base64
import html
import math
import re
import time
from pathlib import Path
from typing import Iterable

import pandas as pd

from harness.results import compare, dataparallel_report, ledger, quality_report, regime_report, rivals
from harness.results import verdict, workers_report
from harness.results.compare import BASELINE, CI_MIN_SEEDS, QUALITY_LAST
from harness.results.files import ResultsError, sweep_extras, sweep_gaps
from harness.results.tables import Run, RunTables, planned_cells, read
from harness.results.wording import count as _count, fmt as _fmt, link as _link, markdown_table, pm as _pm
from harness.results.wording import consistency, num as _num, run_name, seconds_by_part
from trainers import spec


def table_rows(comp: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    head = ["link", "workers", "method", "seeds x updates", "s/update median [IQR]", "speedup vs baseline",
            "payload B/update down (1 worker)", "wire B/update down (all)", "wire B/update up (all)",
            "link B/update down", "% of baseline", "bytes vs budget", "held-out quality (final, mean ± 95% CI)",
            f"train-batch metric (last {QUALITY_LAST}, mean ± sd)", "pipeline",
            "lag median / max", "consistent", "complete"]
    rows = []
    # a swept run parameter (--lordo-k 2,4) tells rows apart that link and workers leave alike: named by the method
    swept = [k for k in compare.coords(comp) if k in comp and k != "workers"] if len(comp) else []
    for _, r in comp.iterrows():
        link = _link(r)
        extra = verdict.beyond_link(r, comp, swept)
        rows.append([link, _fmt(r.get("workers")), r["variant"] + (f" ({', '.join(extra)})" if extra else ""),
                     _seeds_x_updates(r),
                     f"{_fmt(r['s_per_update_median'], 's')} [{_fmt(r['s_per_update_q1'], 's')}, {_fmt(r['s_per_update_q3'], 's')}]",
                     _fmt(r["speedup"], "x"), _fmt(r["payload_bytes_down"], "bytes"), _fmt(r["wire_bytes_down"], "bytes"),
                     _fmt(r["wire_bytes_up"], "bytes"), _fmt(r["link_bytes_down_per_update"], "bytes"),
                     _fraction_cell(r), _bytes_check(r),
                     _heldout(r), f"{r['train_metric_name']} {r['train_metric_mean']:.4g} ± {r['train_metric_sd']:.2g}",
                     _count(r.get("pipeline")), f"{_count(r.get('lag_median'))} / {_count(r.get('lag_max'))}",
                     consistency(r),
                     ("yes" if r["complete"] else "INCOMPLETE") + (", DEGRADED" if r.get("degraded") else "")])
    return head, rows


def _fraction_cell(r) -> str:
    """The "% of baseline" cell: the payload's fraction of the baseline's; for a data-parallel row whose
    bytes were counted over whole sync windows, the steps left out, and where no seed ran a whole window,
    that instead of a figure (compare._sync_windows)."""
    if r.get("no_whole_window") == True:   # noqa: E712  (NaN on HiLo rows)
        k = _num(r.get("window_k"))
        return f"- (no whole sync window in {r['updates_most']} steps" + (f", --lordo-k {k:g})" if k else ")")
    tail = _num(r.get("window_tail_steps"))
    return _fmt(r["fraction_of_full"], "%") + (f" (whole sync windows: {tail:g} tail steps left out)" if tail else "")


def _bytes_check(r) -> str:
    """`98% of 4,603` (payload / budget target), with `UNEQUAL` when compare.py flags the row."""
    v, t = r.get("bytes_vs_budget"), r.get("budget_target_bytes")
    text = "-" if v is None or pd.isna(v) else f"{100 * v:.0f}% of {_fmt(t, 'bytes')}"
    return text + (" UNEQUAL" if r.get("unequal_bytes") else "")


def _equal_bytes_note(comp: pd.DataFrame) -> list[str]:
    """A visible note under the table when methods are compared at bytes more than 10 % apart."""
    if "unequal_bytes" not in comp or not comp["unequal_bytes"].fillna(False).astype(bool).any():
        return []
    bad = comp[comp["unequal_bytes"].fillna(False).astype(bool)]
    items = ", ".join(f"`{r['variant']}` ({_fmt(r['payload_bytes_down'], 'bytes')} B, {_bytes_check(r)})"
                      for _, r in bad.iterrows())
    return [f"**Unequal bytes**: payload bytes per update differ by more than "
            f"{100 * compare.EQUAL_BYTES_TOL:.0f} % from the budget or between methods at the same budget: {items}. "
            "Compare their quality and speed with care.", ""]


def _heldout(r) -> str:
    """The held-out figure of a comparison row: `pass@4 0.412 ± 0.031 (3 seeds)`, or '-'."""
    if pd.isna(r.get("heldout_mean", float("nan"))):
        return "-"
    n = r.get("heldout_seeds")
    text = _pm(r["heldout_mean"], r.get("heldout_ci95"), n=n)
    return f"held-out {r['heldout_name']} {text}" + ("" if "(n=" in text else f" (n={_count(n)})")


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _seeds_x_updates(r) -> str:
    """'3 x 40', or '2 x 5-8' where the seeds recorded different numbers of updates (one cut short)."""
    least, most = r.get("updates_least"), r.get("updates_most")
    if _num(least) is None or _num(most) is None:   # a comparison table older than these columns
        return f"{r['seeds']} x {r['update_rows'] // max(1, r['seeds'])}"
    return f"{r['seeds']} x {int(least)}" + (f"-{int(most)}" if most != least else "")


def _run_header(run: Run, runs: list[Run] = ()) -> list[str]:
    meta = run.meta
    status = meta.get("status", "unknown")
    flag = "" if meta.get("complete") else f" — **INCOMPLETE ({status})**: partial results"
    if meta.get("status_note"):
        flag += f" ({meta['status_note']})"
    pk = meta.get("packages") if isinstance(meta.get("packages"), dict) else {}
    lines = [f"- `{run_name(run.dir, [r.dir for r in runs])}`: status {status}{flag}; profile `{meta.get('profile')}`{_overridden(run.config)}, backend "
             f"`{meta.get('backend')}`, emulation {'on' if meta.get('emulation') else 'off (localhost, unshaped)'}; "
             f"git {str(meta.get('git_sha'))[:10]}{' (dirty)' if meta.get('git_dirty') else ''}, kernel "
             f"{meta.get('kernel')}, torch {pk.get('torch')}, host {meta.get('host')}"]
    if setup := _setup(run.config):
        lines.append(f"  - setup: {setup}")
    cost = meta.get("overhead")
    if isinstance(cost, dict) and all(_finite(cost.get(k)) for k in ("overhead_s", "run_s")) and cost["run_s"] > 0:
        until = " until this report (its own writing and figures come after)" if cost.get("until") == "report" else ""
        parts = cost.get("parts")
        split = (f"; by part, one after another, adding up to it: {seconds_by_part(parts)}" if isinstance(parts, dict) and parts else
                 ": model cache, namespaces and shaping, process starts and joins, tables, prediction, report")
        lines.append(f"  - harness overhead: {cost['overhead_s']:.1f} s of the run's {cost['run_s']:.1f} s were outside "
                     f"the training loops ({cost['overhead_s'] / cost['run_s']:.0%}){until}{split}")
    errors = meta.get("errors") or []
    for err in errors if isinstance(errors, list) else [errors]:  # e.g. a link sampler that failed
        lines.append(f"  - **error**: {' '.join(str(err).split())}")
    return lines


_OVERRIDE_FLAGS = {"rate": "--bw", "delay": "--delay", "jitter": "--jitter", "loss": "--loss", "trace": "--trace"}


def _overridden(cfg: dict) -> str:
    """' with --bw 1mbit' (each link flag the run gave over its profile, from config.json's overrides; a trace
    by its file name): the profile's name alone would claim its own rates; "" without any."""
    given = cfg.get("overrides") if isinstance(cfg, dict) and isinstance(cfg.get("overrides"), dict) else {}
    flags = [f"{_OVERRIDE_FLAGS[k]} {Path(str(v)).name if k == 'trace' else v}"
             for k, v in given.items() if k in _OVERRIDE_FLAGS and v not in (None, "")]
    return f" with {' '.join(flags)}" if flags else ""


def _setup(cfg: dict) -> str:
    """What a run trained, from its config.json: model, task and objective (with the options given),
    workers, updates and seeds, LoRA rank; "" for a config without them (a wrapped run, an old folder)."""
    if not isinstance(cfg, dict) or not cfg.get("model"):
        return ""
    named = lambda key: f"{key} `{cfg[key]}`" + (f" ({cfg[key + '_options']})" if cfg.get(key + "_options") else "")  # noqa: E731
    seeds = cfg.get("seeds") if isinstance(cfg.get("seeds"), list) else []
    methods = [str(v.get("method")) for v in cfg.get("variants") or [] if isinstance(v, dict)]
    dp = [spec.is_data_parallel(m) for m in methods]
    trained = [named(k) for k in ("task", "objective") if cfg.get(k)] if not (dp and all(dp)) else []
    if any(dp):   # the data-parallel methods pre-train the generated corpus, not --task
        trained.append(f"{'the data-parallel methods: ' if not all(dp) else ''}the generated corpus pre-trained "
                       f"(--dp-train {cfg.get('dp_train') or 'full'})")
    parts = [f"model `{cfg['model']}`", *trained,
             *([f"{cfg['workers']} worker{'s' if cfg['workers'] != 1 else ''}"] if isinstance(cfg.get("workers"), int) else []),
             *([f"{cfg['updates']} {'optimizer steps' if dp and all(dp) else 'updates'} x seeds "
                f"{', '.join(map(str, seeds))}"] if cfg.get("updates") and seeds else []),
             *([f"LoRA rank {cfg['lora_rank']}"] if cfg.get("lora_rank") and not (dp and all(dp) and
                                                                               cfg.get("dp_train") != "lora") else [])]
    return ", ".join(parts)


def cell_rows(runs: list[Run], cells: pd.DataFrame) -> list[list[str]]:
    """The Cells table: a row per cell folder, and per planned cell (meta.json's `cells`, config.json's
    variants x seeds) that has none (the run stopped before it: interrupted, failed), so a cell that
    never started is listed with why. A folder with no update whose meta.json `errors` line says it was
    not started (its processes could not be started) carries that line, not "interrupted"."""
    rows = [[c["run_id"], c["cell"], c["status"], f"{_count(c['updates_done'])} / {_count(c['updates_planned'])}",
             str(c["hash_checks"]), consistency(c), _count(c.get("workers_min")), c.get("note") or ""]
            for _, c in cells.iterrows()]
    for run in runs:
        name = run.dir.name
        errors = run.meta.get("errors") if isinstance(run.meta.get("errors"), list) else []
        own = {cell: " ".join(str(e)[len(cell) + 2:].split()) for cell in planned_cells(run.config, run.meta)
               for e in errors if str(e).startswith(f"{cell}: ")}
        for row in rows:
            if row[0] == name and own.get(row[1], "").startswith("not started") and row[3].startswith("0 /"):
                row[2] = own[row[1]]
        have = {row[1] for row in rows if row[0] == name}
        status = str(run.meta.get("status", "unknown"))
        for cell in planned_cells(run.config, run.meta):
            if cell in have:
                continue
            why = own.get(cell) or ""
            why = (why if why.startswith("not started") else f"not started: {why}" if why else
                   "not started yet (the run is still going)" if status == "running" else
                   f"not started (the run ended {status} before it)")
            rows.append([name, cell, why, f"0 / {_count(run.config.get('updates'))}", "-", "-", "-", ""])
    return rows


def _degraded(cells: pd.DataFrame) -> list[str]:
    """One line per cell that lost a worker: who, at which version, how many remained."""
    if cells.empty or "degraded" not in cells:
        return []
    rows = cells[cells["degraded"].fillna(False).astype(bool)]
    lines = [f"- `{c['run_id']}` `{c['cell']}` ({c['status']}): {c['note']}"
             f"{'; fewest workers in an update: ' + _count(c['workers_min']) if pd.notna(c.get('workers_min')) else ''}"
             for _, c in rows.iterrows()]
    return ["## Degraded cells (a worker was lost)", "", *lines, ""] if lines else []


def _load_section(comp: pd.DataFrame) -> list[str]:
    """Speedup per paired seed with its 95 % CI, the same with compute charged at CPU time
    (compare.cpu_charged), the clock the headline speedup is on, and how busy the machine was; a
    line when it was contended."""
    if comp.empty or "speedup_seed_mean" not in comp or comp["speedup_seed_mean"].isna().all():
        return []
    head = ["link", "method", "speedup over seeds [95 % CI]", "speedup, compute at CPU time [95 % CI]",
            "headline", "load per core", "steal", "train CPU / wall", "contended"]
    rows, busy = [], []
    for _, r in comp.iterrows():
        flag = r.get("contended")
        rows.append([_link(r), quality_report.method_cell(comp, r),
                     _fmt(r["speedup_seed_mean"], "x") + _ci(r, "speedup_ci") + f" ({r['speedup_seeds']} seeds)",
                     _fmt(r.get("speedup_cpu"), "x") + _ci(r, "speedup_cpu"), _headline(r),
                     _fmt(r.get("load_per_core"), "s"), _fmt(r.get("steal_frac"), "%"), _fmt(r.get("train_cpu_wall"), "s"),
                     "-" if flag is None or pd.isna(flag) else f"YES: {r['contention']}" if flag else "no"])
        if flag is True:
            busy.append(f"- `{r['variant']}`: the machine was contended ({r['contention']}): its wall-clock "
                        "speedup may not hold on a quiet machine, so the headline is the CPU-time figure.")
    return ["## Speedup over seeds and machine load", "",
            "Per seed: the baseline's median seconds per update / the method's, paired on the seed (the cells of a "
            "seed run next to each other, `--schedule interleaved`); geometric mean with a t interval over seeds. "
            "Compute at CPU time: the learner's compute phases and the workers' rollouts charged at the CPU "
            "seconds they used, as far as they were on the critical path (at `--pipeline 1` a wait beside the link "
            "or the other side's work is not taken out), and never below what the link itself needed. Headline: "
            "the speedup the report leads with, the mean over paired seeds with its interval, on CPU time wherever a "
            "variant under the same link was contended (both sides then on the same clock), else on the wall clock. "
            f"Contended: load above {compare.CONTENDED_LOAD:g} per core, steal above "
            f"{compare.CONTENDED_STEAL:.0%}, or the single-threaded train phase below {compare.CONTENDED_CPU_WALL:g} "
            "CPU per wall second.", "", markdown_table(head, rows), "", *busy, *([""] if busy else [])]


def _ci(r, prefix: str) -> str:
    """" [lo, hi]" from r[prefix_lo], r[prefix_hi]; "" without an interval."""
    lo, hi = r.get(f"{prefix}_lo"), r.get(f"{prefix}_hi")
    return f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None and pd.notna(lo) and pd.notna(hi) else ""


def _headline(r) -> str:
    """The headline speedup with its interval and clock ("1.05x [0.98, 1.12], CPU time")."""
    basis, v = r.get("speedup_headline_basis"), r.get("speedup_headline")
    if basis is None or v is None or pd.isna(basis) or pd.isna(v):
        return "-"
    return (_fmt(r.get("speedup_headline"), "x") + _ci(r, "speedup_headline")
            + (", CPU time" if basis == "cpu" else ", wall clock"))


def _measured_links(doc: dict) -> list[str]:
    """The "Container links (measured)" section from a run's calibration.json (the containers front
    door measures each worker link like `harness calibrate` before the cells); [] without one."""
    if not doc or not isinstance(doc.get("rows"), list):
        return []
    mbit = lambda v: "-" if v is None else f"{v / 1e6:.2f}"   # noqa: E731  (bit/s -> Mbit/s)
    ms = lambda v: "-" if v is None else f"{v * 1e3:.1f}"      # noqa: E731  (s -> ms)
    head = ["link", "direction", "rate (Mbit/s)", "goodput (Mbit/s)", "RTT want (ms)", "RTT median (ms)",
            "loss want", "lost/sent"]
    rows = [[r["node"], r["direction"], mbit(r["rate_bit_s"]), mbit(r["goodput_bit_s"]), ms(r["rtt_want_s"]),
             ms(r["rtt_median_s"]), f"{r['loss_want']:.2%}", f"{r['loss_lost']}/{r['loss_sent']}"] for r in doc["rows"]]
    return ["## Container links (measured)", "",
            f"Each worker container's path to the learner container, measured like `harness calibrate` "
            f"({doc.get('secs', 0):g} s of TCP per direction; profile {doc.get('profile')}, {doc.get('backend')} "
            "backend).", "", markdown_table(head, rows), ""]


# ---- figures --------------------------------------------------------------------------------

def figures_section(captions: list[tuple[str, str]]) -> list[str]:
    """(figure file under figures/, caption) -> the Figures section: each figure, then its caption."""
    if not captions:
        return []
    out = ["## Figures", ""]
    for name, caption in captions:
        out += [f"![{name}](figures/{name})", "", f"*{name}*: {caption}", ""]
    return out


def sweep_notes(paths: Iterable[str | Path]) -> list[str]:
    """A line per sweep among `paths` whose planned grid points lack a run folder (not run yet, removed);
    a malformed sweep.json is a ResultsError, as any malformed results file."""
    notes = []
    for path in map(Path, paths):
        gaps = sweep_gaps(path)
        if gaps and gaps[0]:
            missing, planned = gaps
            notes += [f"**Sweep `{path.name}`: {len(missing)} of {planned} planned points "
                      f"{'has' if len(missing) == 1 else 'have'} no run folder: "
                      + ", ".join(f"`{m}`" for m in missing) + "** (`harness sweep` with the same grid and "
                      "--out runs them).", ""]
        extra = sweep_extras(path)
        if extra:   # an earlier grid's points in the same --out: reported, but said not to be this grid's
            notes += [f"**Sweep `{path.name}`: {len(extra)} run folder{'s' if len(extra) != 1 else ''} under runs/ "
                      f"{'are' if len(extra) != 1 else 'is'} not in its grid (an earlier grid's points): "
                      + ", ".join(f"`{m}`" for m in extra) + "; reported beside the grid's own.**", ""]
    return notes


def build(tables: RunTables, captions: list[tuple[str, str]] = (),
          comp: pd.DataFrame | None = None, notes: list[str] = ()) -> tuple[str, pd.DataFrame]:
    """(markdown, comparison table) over every run in `tables` (`comp`: their compare.comparison, if made;
    `notes`: lines under the title, such as sweep_notes)."""
    cells = tables.cells
    comp = compare.comparison(tables.updates, cells, tables.evals) if comp is None else comp
    head, rows = table_rows(comp)
    title = tables.runs[0].dir.name if len(tables.runs) == 1 else f"{len(tables.runs)} runs"
    alone = sum(str(r.config.get("baseline")) == spec.NO_BASELINE for r in tables.runs)
    if len(tables.runs) > 1 and 0 < alone < len(tables.runs):   # the title counts only what was compared
        title += f" ({alone} of them ran no baseline: `--baseline none`)"
    # a config.json whose baseline is not a name (null, a number) names none: no row is its baseline
    names = sorted({b for b in comp["baseline"] if isinstance(b, str)} - {spec.NO_BASELINE}) \
        if "baseline" in comp else [BASELINE]
    base = ", ".join(f"`{b}`" for b in names) or "no baseline (--baseline none: no speedups)"
    pairs = dataparallel_report.baseline_pairs(tables.updates)   # the data-parallel rows' paired perplexity
    md = [f"# Comparison against {base}: {title}", "", *notes, *verdict.verdict(comp, tables.runs, cells, pairs), "## Runs", ""]
    for r in tables.runs:
        md += _run_header(r, tables.runs)
    md += ["", "## Seconds per update, bytes and quality", "",
           (f"Speedup = median seconds per update of {base} / that of the method, under the same link, pooled over "
            "seeds (the verdict's headline is the geometric mean of the per-seed speedups, on CPU time when the "
            "machine was contended: the load section below). " if names else
            "No speedup: no baseline ran (`--baseline none`). ") +
           "Payload = the update message body; wire = framed bytes written to the sockets; link = bytes "
           "the worker links carried (IP packets). A data-parallel method's bytes are the mean per optimizer step, a "
           "K-step method's (diloco, lordo-*) over whole sync windows only, as in the data-parallel section: the "
           "steps of a last partial window are left out of its bytes and its % of baseline (named in that cell), and "
           "a run shorter than --lordo-k has none to count. Held-out quality: the final figure on problems never trained on "
           f"(mean ± 95 % CI over seeds, n shown below {CI_MIN_SEEDS}); train-batch metric: the training batch's own "
           "figure (the distillation loss for distill, the mean reward for grpo, the LM loss for data-parallel "
           "methods; not held-out quality), mean ± sd over seeds "
           "of the mean over the last "
           f"{QUALITY_LAST} updates of each seed.", "", markdown_table(head, rows), "", *_equal_bytes_note(comp),
           *regime_report.section(tables.runs), *_load_section(comp), *quality_report.section(comp),
           *rivals.section(tables.updates, comp),
           *dataparallel_report.section(tables.updates), *ledger.section(tables.updates),
           *ledger.model_section(tables.runs), *workers_report.section(tables.runs), "## Cells", ""]
    ch = ["run", "cell", "status", "updates done / planned", "hash checks", "consistent", "fewest workers", "notes"]
    md += [markdown_table(ch, cell_rows(tables.runs, cells)), "", *_degraded(cells)]
    for r in tables.runs:
        md += _measured_links(r.calibration)
    md += figures_section(list(captions))
    return "\n".join(md), comp


def write(path: str | Path, extra: Iterable[str | Path] = (), tables: RunTables | None = None,
          out: str | Path | None = None, timings: dict[str, float] | None = None) -> Path:
    """report.md, report.html and figures/ in `out` (default `path`), covering every run under `path`
    (and `extra`); the runs are parsed here unless `tables` (already read by the caller) is given.
    `timings`: filled with the wall seconds of the figures and of the report's text (a run's fixed cost)."""
    out = Path(out) if out is not None else Path(path)
    tables = tables if tables is not None else read([path, *extra])
    timings = {} if timings is None else timings
    notes = sweep_notes([path, *extra])
    try:
        out.mkdir(parents=True, exist_ok=True)
        t = time.monotonic()
        comp = compare.comparison(tables.updates, tables.cells, tables.evals)   # once, for figures and text
        captions = _write_figures(path, tables, out / "figures", comp)
        timings["figures"] = time.monotonic() - t
        t = time.monotonic()
        md, _ = build(tables, captions, comp, notes)
        (out / "report.md").write_text(md)
        (out / "report.html").write_text(to_html(md, out, title=out.name))
        timings["report text (md, html)"] = time.monotonic() - t
    except OSError as err:   # a read-only or full disk, a file where the folder should be
        raise ResultsError(f"{out}: cannot write the report ({err.strerror or type(err).__name__})") from None
    return out / "report.md"


def _write_figures(path, tables: RunTables, folder: Path, comp: pd.DataFrame | None = None) -> list[tuple[str, str]]:
    """Every figure into `folder`; (PNG file name, caption) for the report. A run with no update yet
    has no figure (its report still says what happened)."""
    from harness.results import plots  # matplotlib: only where figures are drawn

    try:
        drawn, _ = plots.write_plots(path, tables=tables, out=folder, comp=comp)
    except ValueError:  # no completed update to plot yet
        return []
    return [(f"{p.name}.png", p.caption) for p in drawn]


HTML_STYLE = ("body{font:14px/1.45 sans-serif;max-width:1200px;margin:1em auto;padding:0 1em}"
              "td,th{padding:2px 8px;border:1px solid #ccc}table{border-collapse:collapse;font-size:12px;display:block;overflow-x:auto}"
              "img{max-width:100%}code{background:#f4f4f4}")


def to_html(md: str, folder: Path, title: str = "report") -> str:
    """The whole report as one self-contained HTML page: the markdown rendered (CommonMark + tables,
    markdown-it-py), every figure under `folder` inlined as a base64 PNG, so the file can be mailed."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark").enable("table").render(md)

    def inline(m: re.Match) -> str:
        png = folder / m.group(1)
        if not png.is_file():
            return m.group(0)
        return f'src="data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()}"'

    body = re.sub(r'src="(figures/[^"/]+\.png)"', inline, body)
    return (f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{HTML_STYLE}</style></head><body>{body}</body></html>")
