"""report.html carries the whole report: the same sections as report.md and every figure inline
(base64 PNG), checked in a real headless browser (Debian's chromium; skipped, with the reason,
where it is absent)."""
import base64
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.results import report

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "runs"
HELDOUT = FIXTURES / "run-heldout"
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
HEADLESS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    run = tmp_path_factory.mktemp("html") / "run"
    shutil.copytree(HELDOUT, run)
    report.write(run)
    return run


def sections(md: str) -> list[str]:
    return [line[3:] for line in md.splitlines() if line.startswith("## ")]


def test_html_has_every_section_and_every_figure_inline(built):
    md, page = (built / "report.md").read_text(), (built / "report.html").read_text()
    h2 = re.findall(r"<h2>(.*?)</h2>", page)
    assert h2 == sections(md) and "Figures" in h2
    pngs = sorted(p.name for p in (built / "figures").glob("*.png"))
    inline = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(inline) == len(pngs) >= 5
    assert {base64.b64decode(s)[:8] for s in inline} == {b"\x89PNG\r\n\x1a\n"}
    assert 'src="figures/' not in page                      # nothing left to a file beside the page


def run_browser(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([BROWSER, *HEADLESS, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(BROWSER is None, reason="no chromium on this machine (apt-get install -y chromium)")
def test_a_headless_browser_renders_the_whole_report(built, tmp_path):
    url = (built / "report.html").resolve().as_uri()
    dom = run_browser("--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "Verdict" in dom.stdout and "Regime" in dom.stdout and "Held-out quality and time to quality" in dom.stdout
    shot = tmp_path / "report.png"
    done = run_browser(f"--screenshot={shot}", "--window-size=1280,4000", "--hide-scrollbars", url)
    assert done.returncode == 0 and shot.stat().st_size > 20_000, done.stderr[-2000:]
    # The inlined figures decode and draw: the browser reports each image's natural width.
    js = tmp_path / "probe.html"
    js.write_text(f'<iframe id=f src="{url}" width=1200 height=800></iframe><script>'
                  'document.getElementById("f").onload=()=>{const d=document.getElementById("f").contentDocument;'
                  'document.title=[...d.images].map(i=>i.naturalWidth).join(",")}</script>')
    probe = run_browser("--allow-file-access-from-files", "--virtual-time-budget=20000", "--dump-dom", js.as_uri())
    widths = re.search(r"<title>([\d,]*)</title>", probe.stdout)
    assert widths and widths.group(1) and all(int(w) > 100 for w in widths.group(1).split(","))
