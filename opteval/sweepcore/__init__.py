"""The sweep's Ray-free state: configuration, plan, ledger, lease, tracking, the backend specs.

A sibling of ``opteval.evalcore``: it never imports Ray nor ``cluster`` (tests/core/test_layering.py),
so ``plan_only`` runs, reports and the viewer work without a cluster, and ``cluster`` (what
needs Ray) builds on it.
"""
