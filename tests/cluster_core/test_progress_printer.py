"""What the sweep prints while it runs: one line per change, a heartbeat that says it is waiting
while nothing comes back, the final line once; a tqdm bar on a terminal."""
from __future__ import annotations

import io

from opteval.cluster.driver.progress import Progress, ProgressPrinter


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_identical_lines_are_not_repeated_until_the_heartbeat():
    out = io.StringIO()
    p = Progress(planned=4, already=0)
    printer = ProgressPrinter(p, out, heartbeat_s=3600)
    for _ in range(8):  # eight intervals before the first trajectory is back
        printer.tick()
    assert out.getvalue().count("[sweep] 0/4") == 1
    p.record("m", "direct", True, False)
    printer.tick()
    printer.tick()
    assert out.getvalue().count("[sweep] 1/4") == 1
    printer.close()  # the last tick showed the final state already
    assert len(out.getvalue().splitlines()) == 2


def test_the_heartbeat_says_what_it_is_waiting_for():
    out = io.StringIO()
    p = Progress(planned=4, already=0)
    printer = ProgressPrinter(p, out, heartbeat_s=0.0)
    printer.tick()
    printer.tick()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "no trajectory back yet" in lines[1] and "waiting" in lines[1]


def test_a_terminal_gets_a_bar_and_the_final_line():
    out = Tty()
    p = Progress(planned=10, already=2)
    printer = ProgressPrinter(p, out)
    p.record("m", "direct", False, True)
    printer.tick()
    printer.close()
    text = out.getvalue()
    assert "3/10" in text and "errors 1" in text  # tqdm's bar, then the plain final line
    assert text.rstrip().splitlines()[-1].startswith("[sweep] 3/10")
