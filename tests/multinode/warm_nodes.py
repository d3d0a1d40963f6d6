"""A task on every alive node, run as a job with the rehearsal's working_dir before the sweep.

Why: the rehearsal's three nodes run on one machine and share one session directory, and each
node's runtime-env agent unpacks a job's working_dir the first time that node needs it, deleting
the copy already there (Ray 2.60: ``download_and_unpack_package(..., overwrite=True)``). A sweep
driver importing a module lazily at that moment finds it gone (seen once:
``ModuleNotFoundError: No module named 'opteval.cluster.actors'``). On a real cluster each node
has its own disk. After this job every agent holds the package in its cache, so the sweep's job
(the same working_dir, the same package) unpacks nothing again. The warm-up itself meets that
race (seen once: a task's ``os.getcwd()`` failed because another node's agent had just replaced
the directory), so it asks one node at a time and asks again, up to three rounds, any node whose
task found its directory gone.
"""
from __future__ import annotations

import os

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=0, max_calls=1)  # a fresh worker each ask: a replaced cwd stays broken
def where() -> str | None:
    try:
        return os.getcwd()
    except FileNotFoundError:  # another node's agent replaced the shared directory under us
        return None


def main() -> None:
    ray.init()
    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    dirs: dict[str, str] = {}
    for _ in range(3):
        for n in nodes:
            if n not in dirs:
                got = ray.get(where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote())
                if got is not None:
                    dirs[n] = got
        if len(dirs) == len(nodes):
            break
    missing = [n for n in nodes if n not in dirs]
    if missing:
        raise SystemExit(f"[rehearsal] working_dir still missing on {len(missing)} node(s) after 3 rounds")
    print(f"[rehearsal] working_dir unpacked on {len(nodes)} node(s): {sorted(set(dirs.values()))}")


if __name__ == "__main__":
    main()
