"""The Ray actors of a sweep: sandbox executors and harness workers."""
