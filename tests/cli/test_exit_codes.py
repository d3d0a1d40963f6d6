"""One exit-code vocabulary: opteval.exit_codes.ExitCode. The README's table and docs/errors.md
are checked against it, and no module defines a code as a bare number."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from opteval.exit_codes import SWEEP_CODES, ExitCode

REPO = Path(__file__).resolve().parents[2]


def _table_codes(text: str, heading: str) -> list[int]:
    start = text.index(heading)
    rows = []
    for line in text[start:].splitlines()[1:]:
        m = re.match(r"\|\s*(\d+)\s*\|", line)
        if m:
            rows.append(int(m.group(1)))
        elif rows and not line.startswith("|"):
            break
    return rows


def test_the_readme_table_lists_exactly_the_sweeps_codes():
    codes = _table_codes((REPO / "README.md").read_text(), "Exit codes of `opteval sweep`")
    assert codes == sorted(codes) and set(codes) == {int(c) for c in SWEEP_CODES}, codes


def test_every_code_in_docs_errors_is_a_member():
    codes = set(_table_codes((REPO / "docs" / "errors.md").read_text(), "# Exit codes"))
    assert codes and codes <= {int(c) for c in ExitCode}, codes - {int(c) for c in ExitCode}


def test_no_module_defines_an_exit_code_as_a_number():
    bad = []
    for path in (REPO / "opteval").rglob("*.py"):
        if "reference" in path.parts or path.name == "exit_codes.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, int)
                    and any(isinstance(t, ast.Name) and t.id.startswith("EXIT_") for t in node.targets)):
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not bad, bad


def test_codes_keep_their_values():
    # other tools (schedulers retrying on 5 or 6, CI treating 4 apart) depend on the numbers
    assert [(c.name, int(c)) for c in ExitCode] == [
        ("OK", 0), ("FAILED", 1), ("USAGE", 2), ("COMMIT", 3), ("ERROR_ROWS", 4), ("STARTUP", 5),
        ("ENDPOINT", 6), ("INTERRUPTED", 130)]
    assert ExitCode.UNAVAILABLE is ExitCode.COMMIT and str(ExitCode.INTERRUPTED) == "130"
