"""The fork-server process: warm imports, a private root, a pool of prepared children, one event loop.

Started as ``python -m opteval.evalcore.sandbox.forkserver --ctl-fd N`` by
:class:`opteval.evalcore.sandbox.ForkServer` (``host.py``). Modules:

- ``main``: start-up (namespaces, warm imports, the ``ready`` handshake), then the loop
- ``loop``: :class:`EventLoop`, the single-threaded selector loop that moves jobs along
- ``pool``: children forked ahead of demand (:class:`Pool`, :class:`Slot`), refill, reaping
- ``job``: one run or session (:class:`Job`): lifecycle, limits, output capture
- ``outcome``: the pure outcome classifier (:func:`classify`)
- ``zygote``: the process that forks prepared children off the event loop
- ``isolation``: the user namespace (without root), the PID-namespace factory, the private root
- ``warm``: imports and one tiny solve per solver before the first fork
- ``log``: stderr logging that is safe in forked children

Process tree (namespaced mode; without root the same tree sits inside a user namespace and a
PID namespace of its own, under a small shim that stays outside, see
``isolation.enter_user_namespace``)::

    fork server (single-threaded event loop; own mount, network and IPC namespaces,
    │             pivoted into a read-only root holding only the Python installation, /usr,
    │             a few /etc files and /dev/{null,zero,full,random,urandom})
    ├── ns factory (small: forked before the heavy imports; keeps a stock of fresh PID
    │   │           namespaces, each with a tiny init that only reaps orphans)
    │   └── init (pid 1 of one run's PID namespace)
    └── zygote (a fork of the warm server that forks prepared children *into* those
        │       namespaces with setns, so each child is a copy-on-write warm interpreter)
        └── child (pid 2 of its namespace: private /proc, /tmp, /dev/shm and /sandbox
                   on tmpfs, a throwaway uid (without root: a nested user namespace),
                   scrubbed environment; runs one program or one session's cells)

Killing a run's init kills every process the program started (children, setsid
grandchildren, PuLP's CBC); a child that finishes normally kills its namespace itself
(``kill(-1)``) before reporting, so the server can answer before the kernel's teardown.

Why this shape: forking the warm interpreter costs ~3 ms on an idle 2-core VM (10+ ms under
load) and blocks the forking process, so the zygote does it off the event loop, ahead of
demand; PID namespaces come from a small process where a fork is cheap. Mount and network
namespaces that never change (the read-only root, no network at all) are made once per
server; each child adds its own mount namespace for its private tmpfs mounts.

Without namespaces (``OPTEVAL_SANDBOX_NAMESPACES=0``, or no root and no user namespaces with
uncontained runs explicitly allowed; otherwise the host refuses to start) each child is a
process-group leader in a host temp directory, runs are killed by process group, and every
result says ``contained=False`` with a note.
"""
