"""Bandwidth units as tcconfig (and network people) read them: Mbps is megabits, MBps megabytes, and an
all-lowercase bps unit, which tc(8) reads as bytes, is refused with both readings in one line."""
import subprocess
import sys

import pytest

from harness import units


@pytest.mark.parametrize("text,bit_s", [
    ("62.5Mbps", 62.5e6), ("1Kbps", 1e3), ("2Gbps", 2e9), ("3Mibps", 3 * 1024**2),      # bits
    ("62.5MBps", 500e6), ("1KBps", 8e3), ("1kBps", 8e3), ("2GBps", 16e9), ("1000Bps", 8e3),  # bytes
    ("1KiBps", 8 * 1024), ("62.5mbit", 62.5e6), ("62.5MBit", 62.5e6), ("62.5MBIT", 62.5e6),  # bit: any case
])
def test_bps_units_are_read_by_case(text, bit_s):
    assert units.parse_rate(text) == pytest.approx(bit_s)


@pytest.mark.parametrize("text,as_bytes,as_bits,fix", [
    ("62.5mbps", "500mbit", "62.5mbit", "'62.5mbit' or '62.5MBps'"),
    ("100kbps", "800kbit", "100kbit", "'100kbit' or '100KBps'"),
    ("5000bps", "40kbit", "5kbit", "'5000bit' or '5000Bps'"),
    ("1gbps", "8gbit", "1gbit", "'1gbit' or '1GBps'"),
])
def test_an_all_lowercase_bps_unit_is_refused_with_both_readings(text, as_bytes, as_bits, fix):
    with pytest.raises(units.UnitError) as err:
        units.parse_rate(text)
    message = str(err.value)
    assert "\n" not in message
    assert f"tc reads {text.lstrip('0123456789.')} as bytes/s ({as_bytes})" in message
    assert f"tcconfig as bits/s ({as_bits})" in message and message.endswith(f"write {fix}"), message


def test_the_run_flag_refuses_it_before_anything_runs(tmp_path):
    # the edge the issue was found at: `harness run --bw 62.5mbps` used to run at 500 Mbit/s
    done = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--bw", "62.5mbps", "--dry-run",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--bw" in lines[0] and "'62.5mbps' is ambiguous" in lines[0], done.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_run_flag_reads_mbps_as_megabits(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--bw", "62.5Mbps", "--dry-run",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "62.5mbit" in done.stdout and "500mbit" not in done.stdout, done.stdout


@pytest.mark.parametrize("flag,value", [("--delay", "20"), ("--delay", "0.02"), ("--jitter", "2")])
def test_a_bare_time_flag_is_refused_in_one_line_asking_for_a_unit(tmp_path, flag, value):
    # `--delay 20` was a 20 us link and `--delay 0.02` none at all, under a help that says "[unit: s]"
    done = subprocess.run([sys.executable, "-m", "harness.cli", "run", flag, value, "--dry-run", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [f"error: {flag}: '{value}' needs a unit: {value}ms, {value}s"], done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [["calibrate", "--profile", "lan", "--delay", "20", "--dry-run"],
                                  ["project", "--compute-s", "14", "--bw", "62.5mbit", "--delay", "20"]])
def test_every_command_with_a_delay_flag_asks_for_its_unit(argv):
    done = subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == ["error: --delay: '20' needs a unit: 20ms, 20s"], done.stderr
