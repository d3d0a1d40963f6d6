"""``python -m opteval <job> ...`` is ``opteval <job> ...``."""
from __future__ import annotations

from opteval.jobs.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
