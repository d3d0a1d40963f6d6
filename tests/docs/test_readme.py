"""The README stays a page, its links and the docs' links resolve, and no text cites files outside the checkout.

Why: the README is what a newcomer reads first; a dead link or a citation of a file a clone
does not have (the lab's notes beside the checkout) sends them nowhere. The two Quick start
commands are also what the Makefile and CI run, so they must not drift apart.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MAX_README_LINES = 150
DEMO = "python -m pip install -e . && python jobs/sweep.py"
TEST = "python -m pip install -e '.[test]' && python -m pytest -q -n auto tests"

# Built from pieces so this file does not match itself.
OUTSIDE = re.compile("|".join([re.escape(".." + "/shared"), re.escape("shared" + "/papers"),
                               re.escape("/work" + "/shared"), "papers" + "/0[0-9][0-9]"]))
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml"}
SKIP_DIRS = {"__pycache__", "node_modules", "venv", "results", "build", "dist"}

LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")
INLINE_CODE = re.compile(r"`[^`\n]*`")


def doc_files() -> list[Path]:
    return [README, *sorted((REPO / "docs").glob("*.md"))]


def prose_lines(text: str, keep_code: bool = False) -> list[tuple[int, str]]:
    """(line number, line) outside fenced blocks; inline code removed unless kept (links there are not links)."""
    out, fence = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line.lstrip())
        if m:
            fence = None if fence == m.group(1) else (fence or m.group(1))
            continue
        if fence is None:
            out.append((n, line if keep_code else INLINE_CODE.sub("", line)))
    return out


def heading_anchors(path: Path) -> set[str]:
    """GitHub's anchors for a Markdown file's headings (lower case, punctuation dropped, spaces to -)."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(path.read_text(encoding="utf-8"), keep_code=True):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).replace("`", "").strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def relative_links(path: Path) -> list[tuple[int, str]]:
    links = []
    for n, line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
                links.append((n, target))
    return links


def test_readme_fits_on_a_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(doc: Path):
    bad = []
    for n, target in relative_links(doc):
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        where = f"{doc.relative_to(REPO)}:{n}: {target}"
        if not dest.exists() or REPO not in (dest, *dest.parents):
            bad.append(f"{where}: no such file in the repository")
        elif anchor and dest.suffix == ".md" and anchor not in heading_anchors(dest):
            bad.append(f"{where}: no heading with anchor #{anchor}")
    assert not bad, "\n".join(bad)


def test_the_docs_link_each_other():
    """The README links every docs page, so none is an orphan."""
    linked = {(README.parent / t.partition("#")[0]).resolve() for _, t in relative_links(README)}
    orphans = [str(p.relative_to(REPO)) for p in sorted((REPO / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not orphans, f"docs pages the README does not link: {orphans}"


def repository_texts() -> list[Path]:
    found = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS and not d.endswith(".egg-info")]
        found += [Path(root) / f for f in files if Path(f).suffix in TEXT_SUFFIXES]
    return found


def test_no_text_points_outside_the_repository():
    texts = repository_texts()
    assert README in texts and Path(__file__).resolve() in texts  # the walk sees what it should
    hits = []
    for path in texts:
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(REPO)}:{n}: {line.strip()[:120]}")
    assert not hits, "cite the public source (paper title, arXiv id, repository@commit and file) instead:\n" + "\n".join(hits)


def test_the_pattern_catches_what_it_should():
    for text in ["see " + ".." + "/shared/baselines.md", "(" + "papers" + "/003)", "shared" + "/papers/README.md",
                 "/work" + "/shared/benchmarks/PROVENANCE.md"]:
        assert OUTSIDE.search(text), text
    for text in ["prompts/_shared/problem.md", "{{> _shared/solvers}}", "arXiv 2407.19633"]:
        assert not OUTSIDE.search(text), text


def test_quick_start_commands_match_makefile_and_ci():
    readme_lines = [line.strip() for line in README.read_text(encoding="utf-8").splitlines()]
    assert DEMO in readme_lines and TEST in readme_lines

    make = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^PY \?= python$", make, re.M), "the Makefile's PY default is no longer plain python"
    targets = dict(re.findall(r"^(\w+):\n\t(.+)$", make, re.M))
    assert targets.get("demo", "").replace("$(PY)", "python") == DEMO
    assert targets.get("test", "").replace("$(PY)", "python") == TEST

    ci_lines = [line.strip() for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert TEST in ci_lines, ".ci/run no longer runs the README's test command"


def test_the_link_reader_sees_links_and_anchors(tmp_path):
    """The checks above would pass vacuously if the reader found no links or headings."""
    page = tmp_path / "page.md"
    page.write_text("# Top\n## The `opteval` command\n## A sweep (twice)\n## A sweep (twice)\n"
                    "[a](other.md#x) ![img](pic.png) `[code](not-a-link.md)` [web](https://example.org)\n"
                    "```\n[fenced](not-a-link-either.md)\n```\n", encoding="utf-8")
    assert [t for _, t in relative_links(page)] == ["other.md#x"]
    assert heading_anchors(page) == {"top", "the-opteval-command", "a-sweep-twice", "a-sweep-twice-1"}
    assert len(relative_links(README)) >= 10  # the README's docs list alone has more
