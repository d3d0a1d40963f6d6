"""The per-benchmark bar chart draws each bar's 95% interval (the report's bootstrap) as an error bar."""
from __future__ import annotations

import pandas as pd
from matplotlib.container import ErrorbarContainer

from opteval.evalcore.reporting import plots


def test_bars_carry_their_intervals(tmp_path, monkeypatch):
    figs = []

    def keep(fig, path):
        figs.append(fig)
        return path

    monkeypatch.setattr(plots, "_save", keep)
    main = pd.DataFrame([{"model": "m", "method": "direct", "simulated": False, "nl4opt": 0.5, "nl4opt:low": 0.4,
                          "nl4opt:high": 0.7, "nl4opt:mark": "", "nl4opt:dagger": False,
                          "Macro": 0.5, "Macro:low": 0.4, "Macro:high": 0.7, "Macro:mark": "", "Macro:dagger": False}])
    plots.benchmark_bars(main, tmp_path)
    (ax,) = figs[0].axes
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 1
    segments = bars[0].lines[2][0].get_segments()
    assert [(round(s[0][1], 6), round(s[1][1], 6)) for s in segments] == [(40.0, 70.0), (40.0, 70.0)]
