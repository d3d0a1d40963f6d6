"""The viewer as a browser renders it: headless Chromium (Debian's package; .ci/run installs it)
opens the demo sweep's site from the file system, runs its script and we read the resulting DOM.
A screenshot of the index and of one trajectory page is kept under test-artifacts/ (or
$OPTEVAL_TEST_ARTIFACTS) for a person to look at."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.view.conftest import REPO, SWEEP, args, opteval

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed: `apt-get install -y chromium` "
                                                          "(Debian's package; .ci/run installs it) runs these tests")
# flags that keep a headless Chromium off the network and quiet on a machine with no internet
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--allow-file-access-from-files", "--virtual-time-budget=5000"]


def chromium(*extra: str) -> str:
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *extra], capture_output=True,
                              text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Table(HTMLParser):
    """The rendered rows of the index's table (what the script drew, not the JSON it carries)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.links: list[str] = []
        self._in_body = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tbody":
            self._in_body = True
        elif self._in_body and tag == "tr":
            self.rows.append([])
        elif self._in_body and tag == "td":
            self._cell = []
        elif self._in_body and tag == "a":
            self.links.append(dict(attrs).get("href") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self._in_body = False
        elif tag == "td" and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def rendered(url: str) -> Table:
    table = Table()
    table.feed(chromium("--dump-dom", url))
    return table


def artifacts() -> Path:
    path = Path(os.environ.get("OPTEVAL_TEST_ARTIFACTS", REPO / "test-artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_the_browser_renders_rows_a_filter_and_a_trajectory_page(demo):
    done = opteval("view", *args(demo))
    assert done.returncode == 0, done.stderr
    index = demo / SWEEP / "view" / "index.html"
    every = rendered(index.as_uri())
    assert len(every.rows) == 6, every.rows  # 3 problems x 2 methods, drawn by the page's script
    methods = {row[2] for row in every.rows}
    assert methods == {"direct", "opticycle"}
    direct = rendered(index.as_uri() + "?method=direct")  # the filter, set from the address
    assert len(direct.rows) == 3 and {row[2] for row in direct.rows} == {"direct"}
    page = every.links[0]
    dom = chromium("--dump-dom", (index.parent / page).as_uri())
    assert "Model calls" in dom and 'class="code"' in dom and "submit(" in dom and "Grade" in dom
    shots = artifacts()
    chromium("--window-size=1400,900", f"--screenshot={shots / 'view-index.png'}", index.as_uri())
    chromium("--window-size=1400,1600", f"--screenshot={shots / 'view-trajectory.png'}", (index.parent / page).as_uri())
    for name in ("view-index.png", "view-trajectory.png"):
        assert (shots / name).stat().st_size > 10_000  # a drawn page, not a blank one
