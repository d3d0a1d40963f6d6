"""The plan: every trajectory a sweep must produce, keyed, in the order it should run.

Order is model-major (model, method, benchmark, problem, sample), so one model's
endpoint serves all its methods before the next model is loaded: a GPU cluster can
load models one stage at a time.

Keys are ``opteval.evalcore.records.trajectory_key(...)`` with the fingerprint of what decides
that (model, method, benchmark)'s outcomes (``opteval.sweepcore.config.item_fingerprint``). The
hashing is inlined here (same bytes, same digest; a test checks equality) because the
paper's plan has 589,116 keys and planning plus resume must take seconds.

Why a :class:`Plan` and not a list of items: at 10x the paper (5.9 M keys) a list of
``PlanItem`` objects with their key strings alone takes several GB in the driver. A
``Plan`` stores one row per (model, method, benchmark) and the keys as Arrow string
chunks (~75 bytes each, outside the Python heap); items are made on the fly when
iterated, and :func:`remaining` returns a ``Plan`` over positions (4 bytes each) with
the committed-key test done by Arrow (``is_in``). It is a ``Sequence[PlanItem]``, so
callers index, slice, iterate and ``len()`` it as before.

No Ray import: ``plan_only`` uses this module without starting Ray.
"""
from __future__ import annotations

import bisect
import hashlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from opteval.evalcore.problems import get_entry, load_problem_ids
from opteval.sweepcore.config import ConfigError, SweepConfig, item_fingerprinter, methods_for, samples_for
from opteval.sweepcore.sorted_strings import SortedStrings


@dataclass(frozen=True, slots=True)
class PlanItem:
    """One planned trajectory. ``fingerprint`` is the one hashed into ``key``."""

    key: str
    model: str
    method: str
    benchmark: str
    problem_id: str
    sample: int
    fingerprint: str = ""


def _keys(sweep: str, model: str, method: str, bench: str, pids: list[str], n: int, fp: str) -> list[str]:
    """``trajectory_key`` for every (problem, sample), inlined for speed."""
    sep = "\x1f"
    head = sep.join([sweep, model, method, bench]) + sep
    tail = sep + fp
    prefix = f"{model}/{method}/{bench}/"
    sha = hashlib.sha256
    out: list[str] = []
    append = out.append
    samples = [str(s) for s in range(n)]
    for pid in pids:
        mid = head + pid + sep
        pfx = prefix + pid + "/"
        for s in samples:
            append(f"{pfx}{s}/{sha((mid + s + tail).encode()).hexdigest()[:12]}")
    return out


@dataclass(frozen=True, slots=True)
class _Group:
    """One (model, method, benchmark): its problems x samples, rows ``start .. start + size``."""

    model: str
    method: str
    benchmark: str
    fingerprint: str
    pids: list[str]
    n: int
    start: int
    keys: pa.Array  # string keys, problem-major then sample

    @property
    def size(self) -> int:
        return len(self.pids) * self.n

    def item(self, j: int) -> PlanItem:
        pi, s = divmod(j, self.n)
        return PlanItem(self.keys[j].as_py(), self.model, self.method, self.benchmark, self.pids[pi], s,
                        self.fingerprint)


def _item_iter(g: _Group, rows: Iterable[int] | None) -> Iterator[PlanItem]:
    """Items of ``g`` (all, or local row numbers ``rows``); the frozen ``__init__`` is bypassed
    (object.__setattr__ per field: same object, ~3x faster)."""
    new = object.__new__
    set_ = object.__setattr__
    model, method, bench, fp, pids, n = g.model, g.method, g.benchmark, g.fingerprint, g.pids, g.n
    keys = g.keys.to_pylist() if rows is None else None
    it = range(g.size) if rows is None else rows
    for j in it:
        pi, s = divmod(j, n)
        item = new(PlanItem)
        set_(item, "key", keys[j] if keys is not None else g.keys[j].as_py())
        set_(item, "model", model)
        set_(item, "method", method)
        set_(item, "benchmark", bench)
        set_(item, "problem_id", pids[pi])
        set_(item, "sample", s)
        set_(item, "fingerprint", fp)
        yield item


class Plan(Sequence):
    """Planned trajectories in plan order: every row of ``groups``, or the rows in ``rows``.

    Compact (see the module docstring); a ``Sequence[PlanItem]`` whose items are made when
    asked for. ``rows`` (sorted global positions, ``numpy.int64``) makes a subset, such as
    :func:`remaining`'s, that shares the groups and their keys.
    """

    def __init__(self, groups: list[_Group], rows: np.ndarray | None = None) -> None:
        self.groups = groups
        self.rows = rows
        self._starts = np.array([g.start for g in groups], dtype=np.int64)
        self._total = groups[-1].start + groups[-1].size if groups else 0

    def __len__(self) -> int:
        return self._total if self.rows is None else len(self.rows)

    def _locate(self, pos: int) -> PlanItem:
        gi = int(np.searchsorted(self._starts, pos, side="right")) - 1
        g = self.groups[gi]
        return g.item(pos - g.start)

    @overload
    def __getitem__(self, i: int) -> PlanItem: ...
    @overload
    def __getitem__(self, i: slice) -> Plan: ...
    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            base = np.arange(self._total, dtype=np.int64) if self.rows is None else self.rows
            return Plan(self.groups, base[i])
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("plan index out of range")
        return self._locate(i if self.rows is None else int(self.rows[i]))

    def __iter__(self) -> Iterator[PlanItem]:
        if self.rows is None:
            for g in self.groups:
                yield from _item_iter(g, None)
            return
        for g, local in self._split():
            yield from _item_iter(g, local.tolist())

    def _split(self) -> Iterator[tuple[_Group, np.ndarray]]:
        """(group, local row numbers) for every group with selected rows."""
        assert self.rows is not None
        bounds = np.searchsorted(self.rows, [g.start for g in self.groups] + [self._total])
        for gi, g in enumerate(self.groups):
            lo, hi = bounds[gi], bounds[gi + 1]
            if hi > lo:
                yield g, self.rows[lo:hi] - g.start

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Plan, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"Plan({len(self)} items in {len(self.groups)} groups)"

    def key_array(self) -> pa.ChunkedArray:
        """Every key, in plan order, as Arrow strings (no Python objects)."""
        if self.rows is None:
            return pa.chunked_array([g.keys for g in self.groups], type=pa.string())
        return pa.chunked_array([g.keys.take(pa.array(local)) for g, local in self._split()], type=pa.string())

    def group_counts(self) -> dict[tuple[str, str, str], int]:
        """Items per (model, method, benchmark), in plan order."""
        out: dict[tuple[str, str, str], int] = {}
        if self.rows is None:
            for g in self.groups:
                out[(g.model, g.method, g.benchmark)] = out.get((g.model, g.method, g.benchmark), 0) + g.size
        else:
            for g, local in self._split():
                out[(g.model, g.method, g.benchmark)] = out.get((g.model, g.method, g.benchmark), 0) + len(local)
        return out

    def to_table(self, schema: pa.Schema | None = None) -> pa.Table:
        """The plan as columns ``key, model, method, benchmark, problem_id, sample`` (what
        ``Ledger.record_plan`` stores), built by numpy and Arrow from the groups: one
        dictionary per column, indices per row, cast to strings once."""
        return _parts_table(self._parts(), schema)

    def iter_tables(self, schema: pa.Schema | None = None, max_rows: int = 1 << 18) -> Iterator[pa.Table]:
        """:meth:`to_table` in consecutive pieces of whole groups, about ``max_rows`` rows each:
        at 10x the paper the whole table's string columns alone are ~400 MB, a piece ~20 MB."""
        piece: list[tuple[_Group, np.ndarray | None]] = []
        rows = 0
        for g, local in self._parts():
            piece.append((g, local))
            rows += g.size if local is None else len(local)
            if rows >= max_rows:
                yield _parts_table(piece, schema)
                piece, rows = [], 0
        if piece:
            yield _parts_table(piece, schema)

    def _parts(self) -> list[tuple[_Group, np.ndarray | None]]:
        """(group, its local rows or None for all) for every group with rows, in plan order."""
        return [(g, None) for g in self.groups] if self.rows is None else list(self._split())


def _parts_table(parts: list[tuple[_Group, np.ndarray | None]], schema: pa.Schema | None) -> pa.Table:
    """The plan's columns for ``parts`` (see :meth:`Plan.to_table`)."""
    names: dict[str, dict[str, int]] = {"model": {}, "method": {}, "benchmark": {}}
    pid_base: dict[str, int] = {}
    pid_dict: list[str] = []
    idx: dict[str, list[np.ndarray]] = {c: [] for c in ("model", "method", "benchmark", "problem_id", "sample")}
    keys = []
    for g, local in parts:
        rows = np.arange(g.size, dtype=np.int64) if local is None else local
        for c, v in (("model", g.model), ("method", g.method), ("benchmark", g.benchmark)):
            idx[c].append(np.full(len(rows), names[c].setdefault(v, len(names[c])), dtype=np.int32))
        if g.benchmark not in pid_base:
            pid_base[g.benchmark] = len(pid_dict)
            pid_dict.extend(g.pids)
        idx["problem_id"].append((rows // g.n + pid_base[g.benchmark]).astype(np.int32))
        idx["sample"].append((rows % g.n).astype(np.int32))
        keys.append(g.keys if local is None else g.keys.take(pa.array(local)))

    def column(c: str, dictionary: list[str]) -> pa.Array:
        ix = np.concatenate(idx[c]) if idx[c] else np.zeros(0, dtype=np.int32)
        return pa.DictionaryArray.from_arrays(pa.array(ix), pa.array(dictionary, type=pa.string())).cast(pa.string())

    sample = np.concatenate(idx["sample"]) if idx["sample"] else np.zeros(0, dtype=np.int32)
    table = pa.Table.from_arrays(
        [pa.chunked_array(keys, type=pa.string()), column("model", list(names["model"])),
         column("method", list(names["method"])), column("benchmark", list(names["benchmark"])),
         column("problem_id", pid_dict), pa.array(sample, type=pa.int32())],
        names=["key", "model", "method", "benchmark", "problem_id", "sample"])
    return table if schema is None else table.select(schema.names).cast(schema)


# The largest plan expanded: ~50M keys are ~4 GB of Arrow strings before the ledger, the
# dispatch queue and the report read them again; a sweep that large is several sweeps.
MAX_PLANNED = 50_000_000
BYTES_PER_KEY = 80  # Arrow string of a trajectory key (see expand_plan)


def check_plan_size(cfg: SweepConfig, per_bench: dict[str, tuple[int, int]]) -> int:
    """Count the plan from (problems, samples) per benchmark before expanding it; refuse one
    over :data:`MAX_PLANNED` with the count and the memory its keys alone would take."""
    total = sum(p * n for mo in cfg.models for _ in methods_for(cfg, mo) for p, n in per_bench.values() if n > 0)
    if total > MAX_PLANNED:
        gib = total * BYTES_PER_KEY / 2**30
        raise ConfigError(f"samples: the plan would have {total:,} trajectories (~{gib:,.0f} GiB for its keys "
                          f"alone), over the bound of {MAX_PLANNED:,}; lower samples.default / "
                          "samples.per_benchmark or limit_problems, or split it into several sweeps")
    return total


def check_plan(cfg: SweepConfig, problem_ids: dict[str, list[str]]) -> dict[str, tuple[list[str], int]]:
    """The (problem ids, samples) each benchmark plans, checked (no ids missing or repeated, the
    plan under :data:`MAX_PLANNED`) before any key is made: the driver asks before it opens the
    ledger, so a plan that cannot be made never touches it."""
    missing = [b for b in cfg.benchmarks if b not in problem_ids]
    if missing:
        raise ConfigError(f"benchmarks: no problem ids given for {', '.join(missing)}")
    limit = cfg.limit_problems
    per_bench = {}
    for b in cfg.benchmarks:
        pids = [str(p) for p in problem_ids[b]]
        if len(set(pids)) != len(pids):
            dup = next(p for p, c in Counter(pids).items() if c > 1)
            raise ConfigError(f"benchmarks: problem id {dup!r} appears twice in {b}")
        per_bench[b] = (pids[:limit] if limit is not None else pids, samples_for(cfg, b))
    check_plan_size(cfg, {b: (len(p), n) for b, (p, n) in per_bench.items()})
    return per_bench


def expand_plan(cfg: SweepConfig, problem_ids: dict[str, list[str]]) -> Plan:
    """All planned trajectories, model-major; ``problem_ids[slug]`` in benchmark order.

    Samples per benchmark: ``samples.per_benchmark[slug]``, else the benchmark yaml's
    ``samples``, else ``samples.default``. ``limit_problems`` keeps the first N ids.
    Keys are computed one (model, method, benchmark) at a time and kept as Arrow strings,
    so memory grows by ~80 bytes per key, not by a Python object per item.
    """
    per_bench = check_plan(cfg, problem_ids)
    sweep = cfg.sweep.name
    groups: list[_Group] = []
    start = 0
    item_fingerprint = item_fingerprinter(cfg)
    for model in cfg.models:
        for method in methods_for(cfg, model):
            for bench in cfg.benchmarks:
                pids, n = per_bench[bench]
                if not pids or n <= 0:
                    continue
                fp = item_fingerprint(model, method, bench)
                keys = pa.array(_keys(sweep, model, method, bench, pids, n, fp), type=pa.string())
                groups.append(_Group(model, method, bench, fp, pids, n, start, keys))
                start += len(keys)
    return Plan(groups)


def plan_counts(plan: Iterable[PlanItem]) -> dict[tuple[str, str], int]:
    """Planned trajectories per (model, method), in plan order."""
    if isinstance(plan, Plan):
        out: dict[tuple[str, str], int] = {}
        for (model, method, _), n in plan.group_counts().items():
            out[(model, method)] = out.get((model, method), 0) + n
        return out
    return dict(Counter((p.model, p.method) for p in plan))


def plan_bench_counts(plan: Iterable[PlanItem]) -> dict[tuple[str, str, str], int]:
    """Planned trajectories per (model, method, benchmark), in plan order."""
    if isinstance(plan, Plan):
        return plan.group_counts()
    return dict(Counter((p.model, p.method, p.benchmark) for p in plan))


def remaining(plan: Sequence[PlanItem], committed: Iterable[str]) -> Sequence[PlanItem]:
    """The plan minus committed keys, order kept (what the scheduler dispatches).

    For a :class:`Plan`, a ``Plan`` over the positions still to run: the committed keys
    become one Arrow string array and each group's keys are tested with ``is_in`` (no key
    string is made in Python). A plain list gives a list, as before.
    """
    if not isinstance(plan, Plan):
        done = set(committed.to_pylist()) if isinstance(committed, (pa.Array, pa.ChunkedArray)) else \
            committed if isinstance(committed, (set, frozenset)) else set(committed)
        return [p for p in plan if p.key not in done]
    values = committed if isinstance(committed, (pa.Array, pa.ChunkedArray)) else \
        pa.array(list(committed), type=pa.string())
    if len(plan) == 0:
        return Plan(plan.groups, np.zeros(0, dtype=np.int64))
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], type=pa.string())
    hit = _committed_mask(plan, values)
    if plan.rows is None:
        return Plan(plan.groups, np.flatnonzero(~hit).astype(np.int64))
    return Plan(plan.groups, plan.rows[~hit])


def _committed_mask(plan: Plan, values: pa.Array) -> np.ndarray:
    """Whether each of ``plan``'s keys is in ``values``, in plan order.

    ``values`` sorted (the ledger's committed keys at open are): each group is tested against
    the committed keys between its own first and last key, found by binary search, so no hash
    table of all the committed keys is built (~400 MB at 10x the paper). Otherwise one
    ``is_in`` over every key, Arrow building the committed set's hash table once.
    """
    n = len(values)
    ordered = n < 2 or bool(pc.all(pc.less_equal(values.slice(0, n - 1), values.slice(1))).as_py())
    if not ordered:
        return pc.is_in(plan.key_array(), value_set=values).to_numpy(zero_copy_only=False)
    probe = SortedStrings(values)
    masks = []
    for keys in plan.key_array().chunks:
        if not len(keys):
            continue
        bounds = pc.min_max(keys)
        lo = bisect.bisect_left(probe, bounds["min"].as_py())
        hi = bisect.bisect_right(probe, bounds["max"].as_py(), lo=lo)
        if hi == lo:
            masks.append(np.zeros(len(keys), dtype=bool))
        else:
            masks.append(pc.is_in(keys, value_set=values.slice(lo, hi - lo)).to_numpy(zero_copy_only=False))
    return np.concatenate(masks) if masks else np.zeros(0, dtype=bool)


def registry_counts(cfg: SweepConfig, missing: list[str]) -> dict[tuple[str, str, str], int]:
    """Planned trajectories per (model, method, benchmark) from the registry's pinned counts,
    for ``plan_only`` before the files are fetched (``missing``: benchmarks without a file;
    the others are counted from their files)."""
    limit = cfg.limit_problems
    per_bench = {}
    for b in cfg.benchmarks:
        n = get_entry(b).count if b in missing else len(load_problem_ids(b, cfg.data.dir))
        if n is None:
            raise ConfigError(f"benchmarks: {b} has no pinned count; its file is needed to plan")
        per_bench[b] = min(n, limit) if limit is not None else n
    check_plan_size(cfg, {b: (p, samples_for(cfg, b)) for b, p in per_bench.items()})
    return {(mo, me, b): per_bench[b] * samples_for(cfg, b)
            for mo in cfg.models for me in methods_for(cfg, mo) for b in cfg.benchmarks}


def registry_plan_report(cfg: SweepConfig, missing: list[str]) -> str:
    """The ``plan_only`` output without (some) benchmark files: exact totals, no ledger check."""
    counts = registry_counts(cfg, missing)
    per: dict[tuple[str, str], int] = Counter()
    for (mo, me, _), n in counts.items():
        per[(mo, me)] += n
    lines = [f"planned {sum(counts.values())} trajectories"]
    lines += [f"  {mo} x {me}: {n} planned" for (mo, me), n in per.items()]
    lines.append(f"counted from the benchmark registry: {len(missing)} benchmark file(s) not downloaded "
                 f"({', '.join(missing)}); committed trajectories not checked. A run fetches them itself "
                 f"(data.fetch_missing), or: opteval data fetch {' '.join(missing)}")
    return "\n".join(lines)


def by_model(plan: Sequence[PlanItem]) -> dict[str, Sequence[PlanItem]]:
    """The items of each model, in plan order, grouped once (the schedule does it before any
    replica comes up, so no GPU waits on a pass over the plan). For a :class:`Plan`, one
    ``Plan`` per model over the same groups (numpy on group boundaries; no item is made)."""
    if not isinstance(plan, Plan):
        out: dict[str, list[PlanItem]] = {}
        for it in plan:
            out.setdefault(it.model, []).append(it)
        return dict(out)
    rows = np.arange(len(plan), dtype=np.int64) if plan.rows is None else plan.rows
    bounds = np.searchsorted(rows, [g.start for g in plan.groups] + [plan._total])
    picked: dict[str, list[np.ndarray]] = {}
    for gi, g in enumerate(plan.groups):
        lo, hi = bounds[gi], bounds[gi + 1]
        if hi > lo:
            picked.setdefault(g.model, []).append(rows[lo:hi])
    return {m: Plan(plan.groups, np.concatenate(parts)) for m, parts in picked.items()}
