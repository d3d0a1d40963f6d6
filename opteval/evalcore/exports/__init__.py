"""Results other tools read: a sweep's ledger as inspect_ai logs, lm-evaluation-harness results
and per-sample JSONL (``opteval export``). Each exporter takes plain rows (the ledger's columns
it needs, read with projection by ``jobs/export.py``) and the plan, so it never reads more than
it writes."""
