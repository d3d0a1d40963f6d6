"""MLflow's and SQLAlchemy's own log records go to a file beside the ledger, not the terminal.

Why: when MLflow's store fails (its disk full, a database it cannot open) MLflow logs each
failure with SQLAlchemy's traceback on stderr: a fault campaign counted 309 terminal lines and six
``Traceback`` blocks ahead of the sweep's own one-line exit. The sweep already says what matters
(the tracker's warning, the end line, the re-log command); the libraries' detail stays in
``<sweep dir>/mlflow.log`` for whoever needs it.

MLflow sets its loggers up (their handlers, levels and ``propagate``) when ``mlflow`` is imported,
so :func:`route_library_logs` runs after that import and replaces those handlers. Ray-free.
"""
from __future__ import annotations

import logging
import os
import sqlite3

LOG_FILE = "mlflow.log"
# The loggers MLflow configures (mlflow.utils.logging_utils), and SQLAlchemy's root
LIBRARY_LOGGERS = ("mlflow", "sqlalchemy", "sqlalchemy.engine", "alembic", "huey")


class _QuietFileHandler(logging.FileHandler):
    """A file handler that never prints its own failures (a full disk would otherwise put
    logging's "--- Logging error ---" and a traceback on the terminal)."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


def route_library_logs(directory: str | None) -> str | None:
    """Send the libraries' records to ``directory/mlflow.log`` (the file's path), or, where no local
    directory can hold it, drop them below CRITICAL (None)."""
    handler: logging.Handler
    path = None
    try:
        if directory is None:
            raise OSError("no local directory")
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, LOG_FILE)
        handler = _QuietFileHandler(path, delay=True)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    except OSError:
        handler, path = logging.NullHandler(), None
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.propagate = False
    return path


def sqlite_problem(uri: str) -> str | None:
    """Why a ``sqlite:///`` store cannot be written, in one line, or None (not SQLite, or fine).
    Opens the database and takes its write lock, the way MLflow's first write would."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///"):]
    folder = os.path.dirname(path) or "."
    if not os.path.exists(path):
        if os.access(folder, os.W_OK | os.X_OK):
            return None
        return f"the SQLite store {path} cannot be created: its folder {folder} is missing or not writable"
    try:
        db = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=2.0)
        try:
            db.execute("BEGIN IMMEDIATE")  # the write lock MLflow's first write takes
            db.rollback()
        finally:
            db.close()
    except sqlite3.Error as exc:
        return f"the SQLite store {path} cannot be opened for writing ({type(exc).__name__}: {exc})"
    return None
