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
from tests.view.sites import facets, site_rows, synthetic

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
        self.keys: list[str] = []  # each drawn row's data-key
        self.links: list[str] = []
        self.shards: list[int] = []  # the shards the page loaded (table#rows data-shards)
        self.texts: dict[str, str] = {}  # id -> text of the #shown and #pageinfo spans
        self._span: str | None = None
        self._in_body = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" and a.get("id") == "rows":
            self.shards = [int(n) for n in (a.get("data-shards") or "").split()]
        elif tag == "span" and a.get("id") in ("shown", "pageinfo"):
            self._span = str(a["id"])
            self.texts[self._span] = ""
        if tag == "tbody":
            self._in_body = True
        elif self._in_body and tag == "tr":
            self.rows.append([])
            self.keys.append(a.get("data-key") or "")
        elif self._in_body and tag == "td":
            self._cell = []
        elif self._in_body and tag == "a":
            self.links.append(dict(attrs).get("href") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "span":
            self._span = None
        if tag == "tbody":
            self._in_body = False
        elif tag == "td" and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._span is not None:
            self.texts[self._span] += data
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


def test_a_sharded_index_loads_only_the_shards_it_shows(tmp_path):
    """Issue 44: at the paper's size the index is sharded. The first page loads only the shards its
    200 rows are in; a filter on the cell, status or correct loads only the matching shards (the
    facet index says which); every row is reachable by paging; a text search loads the candidates in
    turn and says how many it searched."""
    from opteval.evalcore.reporting.view import write_site

    table, plan = synthetic(models=2, benchmarks=2, problems=70)  # 560 rows, 8 cells
    site = write_site(table, plan, tmp_path / "v", max_pages=20, shard_bytes=3_000)
    f = facets(site.index)
    rows = site_rows(site.index)
    n = len(f["shards"])
    assert n > len(f["cells"]) and len(rows) == 560
    url = site.index.as_uri()
    first = rendered(url)
    assert len(first.rows) == 200 and first.keys == [r["key"] for r in rows[:200]]
    assert first.texts["shown"].startswith("560 of 560 shown") and "page 1 of 3" in first.texts["pageinfo"]
    covering = sorted({i for i, s in enumerate(f["shards"]) if sum(x[1] for x in f["shards"][:i]) < 200})
    assert sorted(first.shards) == covering and len(covering) < n
    # a cell: only its shards
    cell = f["cells"].index(["m1", "opticycle", "b0"])
    one = rendered(url + "?model=m1&method=opticycle&benchmark=b0")
    assert one.keys == [r["key"] for r in rows if r["key"].startswith("m1/opticycle/b0/")]
    assert set(one.shards) == {i for i, s in enumerate(f["shards"]) if s[0] == cell}
    # status and correct: only the shards whose counts hold such rows
    missing = rendered(url + "?status=missing&model=m0")
    want = [r["key"] for r in rows if r["status"] == "missing" and r["model"] == "m0"]
    assert missing.keys == want and all(row[6] == "missing" for row in missing.rows)
    holders = {i for i, s in enumerate(f["shards"]) if "missing" in s[2] and f["cells"][s[0]][0] == "m0"}
    assert set(missing.shards) == holders and len(holders) < n
    right = rendered(url + "?correct=true&benchmark=b1")
    assert right.keys == [r["key"] for r in rows if r["correct"] and r["benchmark"] == "b1"]
    # every row, page by page
    seen = [k for page in (1, 2, 3) for k in rendered(url + f"?page={page}").keys]
    assert seen == [r["key"] for r in rows]
    # a text search goes through every candidate shard and says so
    found = rendered(url + "?text=p007&method=direct")
    assert found.keys == [r["key"] for r in rows if "p007" in r["key"] and r["method"] == "direct"]
    candidates = sum(f["cells"][s[0]][1] == "direct" for s in f["shards"])
    assert f"(searched {candidates} of {candidates} shards)" in found.texts["shown"]
    # the rows with a page link to it; the others say they have none
    linked = rendered(url + "?status=error&model=m0&method=direct&benchmark=b0")
    assert linked.links and all(link.startswith("traj-") for link in linked.links)
