"""Readable results of a sweep, computed from the ledger only.

Pure library: pandas, pyarrow, numpy and matplotlib (Agg canvas); no Ray. The entry
point is :func:`build_report`; :func:`main_table_from_summary` is shared with the MLflow
path (``opteval.sweepcore.tracking.mlflow_views``) so both give the same main table.
"""
from opteval.evalcore.reporting.frame import ReportError, prepare
from opteval.evalcore.reporting.intervals import BootstrapSpec
from opteval.evalcore.reporting.report import Report, build_report
from opteval.evalcore.reporting.sampling import isc_select, k_values
from opteval.evalcore.reporting.tables import (
    MACRO,
    main_table_from_summary,
    summary_from_prepared,
    to_csv_frame,
    to_latex,
    to_markdown,
)

__all__ = [
    "MACRO", "BootstrapSpec", "Report", "ReportError", "build_report", "isc_select", "k_values", "main_table_from_summary",
    "prepare", "summary_from_prepared", "to_csv_frame", "to_latex", "to_markdown",
]
