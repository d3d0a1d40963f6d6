"""A static, self-contained HTML viewer of a sweep, made from its ledger alone (``opteval view``)."""
from opteval.evalcore.reporting.view.model import (
    STATUS_MISSING,
    Detail,
    TableSource,
    detail,
    index_rows,
    page_name,
    rows_with_missing,
)
from opteval.evalcore.reporting.view.site import DEFAULT_MAX_PAGES, DEFAULT_SHARD_BYTES, SHARD_DIR, Site, write_site

__all__ = ["DEFAULT_MAX_PAGES", "DEFAULT_SHARD_BYTES", "SHARD_DIR", "STATUS_MISSING", "Detail", "Site", "TableSource",
           "detail", "index_rows", "page_name", "rows_with_missing", "write_site"]
