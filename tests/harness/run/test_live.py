"""The live progress display (commands.Live) written to a file or pipe: whole lines, not cut at
rich's 80 columns for a non-terminal (a log of `harness run 2> run.log` kept only the bar)."""
import json

from harness.run import commands, config


def test_progress_to_a_file_keeps_the_whole_line(tmp_path, capsys):
    cfg = config.build(model="micro", method="spar", baseline="none", seed="1", workers=1, updates=3,
                       emulation=False, out_dir=str(tmp_path))
    cell = cfg.cells[0]
    rows = [{"kind": "update", "version": v, "seconds_per_update": 0.05, "update_frame_bytes": {"w1": 4755}}
            for v in range(1, 4)]
    (tmp_path / "events-learner.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with commands.Live(cfg, enabled=True) as live:
        live(cell, tmp_path)
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith(cell.name))
    assert "3/3" in line and line.rstrip().endswith("0.050 s/update (median), 4,755 B/update down (mean) 0:00:00")


def test_bytes_per_update_is_the_mean_so_far(tmp_path, capsys):
    """A data-parallel method syncs every K steps: the bar showed the last update's bytes (a whole sync, or 0),
    1,802,838 B where the report's mean was 1,060,658."""
    cfg = config.build(model="micro", method="spar", baseline="none", seed="1", workers=1, updates=4,
                       emulation=False, out_dir=str(tmp_path))
    cell = cfg.cells[0]
    sent = [0, 3000, 0, 3000]
    rows = [{"kind": "update", "version": v, "seconds_per_update": 0.05, "update_frame_bytes": {"w1": b}}
            for v, b in enumerate(sent, 1)]
    (tmp_path / "events-learner.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with commands.Live(cfg, enabled=True) as live:
        live(cell, tmp_path)
    line = next(x for x in capsys.readouterr().err.splitlines() if x.startswith(cell.name))
    assert "1,500 B/update down (mean)" in line
