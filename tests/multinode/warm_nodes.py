"""A task on every alive node, run as a job with the rehearsal's working_dir before the sweep.

Why: the rehearsal's three nodes run on one machine and share one session directory, and each
node's runtime-env agent unpacks a job's working_dir the first time that node needs it, deleting
the copy already there (Ray 2.60: ``download_and_unpack_package(..., overwrite=True)``). A sweep
driver importing a module lazily at that moment finds it gone (seen once:
``ModuleNotFoundError: No module named 'opteval.cluster.actors'``). On a real cluster each node
has its own disk. After this job every agent holds the package in its cache, so the sweep's job
(the same working_dir, the same package) unpacks nothing again.
"""
from __future__ import annotations

import os

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=0)
def where() -> str:
    return os.getcwd()


def main() -> None:
    ray.init()
    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    dirs = ray.get([where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
                    for n in nodes])
    print(f"[rehearsal] working_dir unpacked on {len(nodes)} node(s): {sorted(set(dirs))}")


if __name__ == "__main__":
    main()
