"""The ledger's manifest and plan, and repair: what a damaged file becomes.

``manifest.json`` holds the resolved config, its fingerprint, the plan's summary, the history of
config changes and the format version (checked on every read: :func:`check_format`);
``plan.parquet`` every planned key. Damage is named, never a traceback: an unreadable data file,
manifest or plan, or a key committed twice, stops the open (:class:`DamagedFileError`,
:class:`DuplicateKeyError`); under ``sweep.repair`` the file is moved into ``quarantine/`` and
its keys run again (:meth:`ManifestMixin.log_quarantined` says which).

``ManifestMixin`` is one part of :class:`opteval.sweepcore.ledger.store.Ledger`; it uses the store's
filesystem and atomic writes, declared below so each part type-checks on its own."""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from opteval.sweepcore.ledger.keyset import KeySet
from opteval.sweepcore.ledger.schema import (
    MANIFEST,
    PLAN_FILE,
    PLAN_SCHEMA,
    QUARANTINE_DIR,
    REPAIR_HINT,
    TRAJ_DIR,
    check_format,
)
from opteval.sweepcore.ledger_errors import DamagedFileError, DuplicateKeyError, LedgerError, _cause
from opteval.sweepcore.plan import Plan

_SCAN_FILES = 256  # files per dataset when reading the committed keys (see Ledger._scan_keys)


def _concat(chunks: Sequence[pa.Array]) -> pa.Array:
    """One string array of key chunks (an empty one for none)."""
    arrays = [c.cast(pa.string()) if c.type != pa.string() else c for c in chunks]
    return pa.concat_arrays(arrays) if arrays else pa.array([], type=pa.string())


def _chunked(chunks: Sequence[pa.Array]) -> pa.ChunkedArray:
    """Key chunks as strings, not copied into one array."""
    return pa.chunked_array([c.cast(pa.string()) if c.type != pa.string() else c for c in chunks], type=pa.string())


def _sorted_keys_sha256(keys: pa.ChunkedArray | pa.Array, chunk: int = 1 << 16) -> str:
    """sha256 of ``"\\n".join(sorted(keys))``, sorted by Arrow (UTF-8 byte order is code-point
    order, as Python sorts) and hashed chunk by chunk: no list of millions of strings.

    A plan's keys come in one chunk per (model, method, benchmark), and those chunks' key
    ranges do not overlap (each key starts with its group's names): each chunk is then sorted
    alone and the chunks hashed in the order of their first keys, so no sorted copy of all the
    keys is ever held (~750 MB at 10x the paper). Chunks that do overlap fall back to one sort.
    """
    chunks = [c for c in (keys.chunks if isinstance(keys, pa.ChunkedArray) else [keys]) if len(c)]
    h = hashlib.sha256()
    if len(chunks) > 1:
        firsts = [pc.min(c).as_py() for c in chunks]
        last: str | None = None
        for i in sorted(range(len(chunks)), key=firsts.__getitem__):
            ordered = chunks[i].take(pc.sort_indices(chunks[i]))
            if last is not None and not last < ordered[0].as_py():
                break  # ranges overlap: sort everything at once below
            _hash_sorted(h, ordered, chunk, first=last is None)
            last = ordered[-1].as_py()
        else:
            return h.hexdigest()
        h = hashlib.sha256()
    if chunks:
        whole = pa.chunked_array(chunks).combine_chunks() if len(chunks) > 1 else chunks[0]
        _hash_sorted(h, whole.take(pc.sort_indices(whole)), chunk, first=True)
    return h.hexdigest()


def _hash_sorted(h: Any, ordered: pa.Array, chunk: int, first: bool) -> None:
    """Feed ``ordered`` to ``h`` as newline-joined UTF-8, ``chunk`` strings at a time."""
    for i in range(0, len(ordered), chunk):
        part = ordered.slice(i, chunk)
        joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(part)], pa.int32()), part), "\n")
        if i or not first:
            h.update(b"\n")
        h.update(joined[0].as_buffer())  # the joined UTF-8 bytes, never a Python str


# -- config diffs -------------------------------------------------------------------------------


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v:
                out.update(_flatten(v, path))
            else:
                out[path] = v
        return out
    return {prefix: obj}


_ABSENT = "<absent>"


def config_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``["sampling.temperature: 0.6 -> 0.7", ...]`` over dotted paths (lists compared whole)."""
    a, b = _flatten(old), _flatten(new)
    lines = []
    for path in sorted(set(a) | set(b)):
        va, vb = a.get(path, _ABSENT), b.get(path, _ABSENT)
        if va != vb:
            lines.append(f"{path}: {_show(va)} -> {_show(vb)}")
    return lines


def _show(v: Any) -> str:
    if v is _ABSENT:
        return _ABSENT
    return json.dumps(v, default=str) if not isinstance(v, str) else v


def _version() -> str:
    try:
        # deferred: inside the try: any failure falls back to the checkout's
        from importlib.metadata import version

        return version("opteval")
    except Exception:  # not installed: running from the checkout
        return "0.1.0+checkout"


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


class ManifestMixin:
    """The manifest, the plan file, and quarantine/repair of a :class:`~opteval.sweepcore.ledger.store.Ledger`."""

    # the store's state and writes (opteval.sweepcore.ledger.store.Ledger sets and defines them)
    fs: pafs.FileSystem
    root: str
    uri: str
    read_only: bool
    repair: bool
    object_store: bool
    quarantined: list[dict[str, Any]]
    _manifest: dict[str, Any] | None
    _keys: KeySet | None
    format: int  # the ledger's format (the manifest's; LEDGER_FORMAT for a new ledger)

    def _own(self) -> None:
        raise NotImplementedError

    def _writable(self) -> None:
        raise NotImplementedError

    def _put_json(self, name: str, obj: Any) -> None:
        raise NotImplementedError

    def _atomic_write_table(self, table: pa.Table, final: str) -> None:
        raise NotImplementedError

    def _atomic_write_tables(self, schema: pa.Schema, tables: Iterable[pa.Table], final: str) -> None:
        raise NotImplementedError

    def _guard_write(self, path: str, fn: Callable[[], Any], verb: str = "cannot write", tmp: str | None = None) -> Any:
        raise NotImplementedError

    def _make_parent(self, path: str) -> None:
        raise NotImplementedError

    def _show(self, path: str) -> str:
        raise NotImplementedError

    def _partition(self, model: str, method: str) -> str:
        raise NotImplementedError

    def _write_manifest(self, old: dict[str, Any] | None, config: dict[str, Any], fingerprint: str,
                        changes: list[str], sweep_name: str) -> None:
        now = _now().isoformat()
        man = dict(old or {"format": self.format, "sweep": sweep_name, "created_at": now, "history": []})
        if old is None or changes:
            man["history"] = list(man.get("history", [])) + [
                {"at": now, "fingerprint": fingerprint, "changes": changes}
            ]
        man.update(fingerprint=fingerprint, config=config, updated_at=now, opteval_version=_version())
        self._put_json(MANIFEST, man)

    def record_manifest_section(self, name: str, value: Any) -> None:
        """Store one more top-level section in the manifest (e.g. the executors' solver versions)."""
        self._writable()
        man = self.manifest() or {}
        man[name] = value
        self._put_json(MANIFEST, man)

    def manifest(self) -> dict[str, Any] | None:
        """The manifest, or None when the sweep has none yet."""
        path = f"{self.root}/{MANIFEST}"
        try:
            with self.fs.open_input_stream(path) as f:
                data = f.read()
        except (FileNotFoundError, OSError) as exc:
            if self.fs.get_file_info(path).type == pafs.FileType.NotFound:
                return None
            raise LedgerError(f"cannot read {self.uri}/{MANIFEST}: {exc}") from exc
        try:
            man = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise DamagedFileError(f"{self.uri}/{MANIFEST}: not valid JSON ({str(exc)[:200]}); {REPAIR_HINT}") from exc
        if not isinstance(man, dict):
            raise DamagedFileError(f"{self.uri}/{MANIFEST}: not a JSON object; {REPAIR_HINT}")
        self.format = check_format(man, f"{self.uri}/{MANIFEST}")
        self._manifest = man
        return self._manifest

    def _manifest_or_repair(self) -> dict[str, Any] | None:
        """The manifest; a damaged one is quarantined under ``repair`` (the sweep then
        continues as if new: the rows keep their own fingerprints)."""
        try:
            return self.manifest()
        except DamagedFileError as exc:
            if not self.repair or self.read_only:
                raise
            self._quarantine(f"{self.root}/{MANIFEST}", str(exc).split("; ")[0], keys=[])
            return None

    def _check_plan_file(self) -> None:
        """A damaged ``plan.parquet`` is named (or quarantined under ``repair``) before it is
        rewritten. Read through batch by batch: at 10x the paper the whole table is ~500 MB."""
        try:
            self.check_plan_readable()
        except DamagedFileError as exc:
            if not self.repair:
                raise
            self._quarantine(f"{self.root}/{PLAN_FILE}", str(exc).split("; ")[0], keys=[])

    # ---- plan ----
    def record_plan(self, plan: Sequence[Any]) -> dict[str, Any]:
        """Store the plan (``plan.parquet``) and its summary in the manifest; returns the summary."""
        self._writable()
        counts: dict[str, int] = defaultdict(int)
        tables: Iterable[pa.Table]
        if isinstance(plan, Plan):
            # columnar, no item objects, written a piece at a time: at 10x the paper the whole
            # table's string columns and a sorted copy of its keys were ~1.1 GB of the driver
            keys: pa.ChunkedArray | pa.Array = plan.key_array()
            tables = plan.iter_tables(PLAN_SCHEMA)
            for (model, method, bench), n in plan.group_counts().items():
                counts[f"{model}/{method}/{bench}"] += n
        else:
            cols = {name: [getattr(p, name) for p in plan] for name in PLAN_SCHEMA.names}
            table = pa.table(cols, schema=PLAN_SCHEMA)
            keys, tables = table.column("key"), [table]
            for p in plan:
                counts[f"{p.model}/{p.method}/{p.benchmark}"] += 1
        summary = {
            "total": len(keys),
            "keys_sha256": _sorted_keys_sha256(keys),
            "counts": dict(counts),
            "recorded_at": _now().isoformat(),
        }
        self._atomic_write_tables(PLAN_SCHEMA, tables, f"{self.root}/{PLAN_FILE}")
        man = self.manifest() or {}
        man["plan"] = summary
        self._put_json(MANIFEST, man)
        return summary

    def read_plan(self) -> pa.Table | None:
        """``plan.parquet`` as written by :meth:`record_plan`, or None."""
        path = f"{self.root}/{PLAN_FILE}"
        if self.fs.get_file_info(path).type == pafs.FileType.NotFound:
            return None
        try:
            return pq.read_table(path, filesystem=self.fs, schema=PLAN_SCHEMA)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise DamagedFileError(f"{self.uri}/{PLAN_FILE}: cannot be read ({_cause(exc)}); {REPAIR_HINT}") from exc

    def check_plan_readable(self) -> None:
        """What :meth:`read_plan` would refuse, refused the same way, with one batch in memory."""
        path = f"{self.root}/{PLAN_FILE}"
        if self.fs.get_file_info(path).type == pafs.FileType.NotFound:
            return
        try:
            dataset = ds.dataset([path], format="parquet", filesystem=self.fs, schema=PLAN_SCHEMA)
            for _ in dataset.to_batches(batch_size=1 << 16, batch_readahead=1, fragment_readahead=1):
                pass
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise DamagedFileError(f"{self.uri}/{PLAN_FILE}: cannot be read ({_cause(exc)}); {REPAIR_HINT}") from exc

    def _scan_keys(self, files: list[str]) -> list[tuple[str, pa.ChunkedArray]]:
        """``[(file, keys)]``, keys as Arrow strings; one dataset scan (fast), or file by file when
        that fails so the damaged ones can be named: :class:`DamagedFileError`, or quarantined
        under ``repair``."""
        if not files:
            return []
        try:
            got: dict[str, list[pa.Array]] = {f: [] for f in files}
            # a few hundred files per dataset: a dataset keeps every scanned file's Parquet
            # metadata (~250 KB for the ledger's 63 columns), 570 MB at 2,272 files, as fast
            for i in range(0, len(files), _SCAN_FILES):
                dataset = ds.dataset(files[i:i + _SCAN_FILES], format="parquet", filesystem=self.fs)
                some: dict[str, list[pa.Array]] = {}
                for batch in dataset.scanner(columns=["key"]).scan_batches():
                    some.setdefault(batch.fragment.path, []).append(batch.record_batch.column(0))
                del dataset
                # one array per file now: the batches' buffers are freed while the next files are
                # read, which reuse them (kept to the end they left 470 MB of holes at 5.3 M keys)
                got.update((f, [_concat(chunks)]) for f, chunks in some.items())
            return [(f, _chunked(chunks)) for f, chunks in got.items()]
        except (pa.ArrowException, OSError, ValueError):
            pass
        per_file, damaged = [], []
        for f in files:
            try:
                keys = pq.read_table(f, columns=["key"], filesystem=self.fs).column(0)
            except (pa.ArrowException, OSError, ValueError, KeyError) as exc:
                damaged.append((f, _cause(exc)))
                continue
            per_file.append((f, _chunked(keys.chunks)))
        if damaged and (not self.repair or self.read_only):
            f, cause = damaged[0]
            more = f" (and {len(damaged) - 1} more damaged file(s))" if len(damaged) > 1 else ""
            raise DamagedFileError(f"ledger {self.uri}: cannot read {self._show(f)}: {cause}{more}; {REPAIR_HINT}")
        for f, cause in damaged:
            self._quarantine(f, f"cannot be read: {cause}", keys=None)
        return per_file

    def _read_keys_checked(self, files: list[str]) -> tuple[KeySet, set[str]]:
        """(committed keys, files moved to quarantine). A key committed twice is a
        :class:`DuplicateKeyError`; under ``repair`` the later file holding it is
        quarantined (its other keys run again). The keys stay in Arrow (:class:`KeySet`);
        Python strings are made only to name a duplicate."""
        per_file = self._scan_keys(files)
        bad = set(files) - {f for f, _ in per_file}
        while True:
            names = [f for f, _ in per_file]
            combined = _concat([c for _, ks in per_file for c in ks.chunks])
            per_file = []  # the chunks go before the sort needs as much again (a duplicate reads them anew)
            keys = KeySet(combined)
            del combined
            if not keys.duplicates():
                return keys, bad
            per_file = self._scan_keys(names)
            seen: dict[str, str] = {}
            dup: tuple[str, str, str] | None = None
            for path, ks in sorted(per_file, key=lambda fk: fk[0]):
                for k in ks.to_pylist():
                    if k in seen:
                        dup = (k, seen[k], path)
                        break
                    seen[k] = path
                if dup:
                    break
            assert dup is not None
            k, first, path = dup
            where = "twice in " + self._show(path) if first == path else \
                f"in {self._show(first)} and in {self._show(path)}"
            if not self.repair or self.read_only:
                raise DuplicateKeyError(f"ledger {self.uri}: key {k!r} is committed {where}; "
                                        "sweep.repair=true moves the later file into <sweep>/quarantine/ "
                                        "and runs its keys again")
            held = dict(per_file)[path].to_pylist()
            self._quarantine(path, f"key {k!r} committed {where}", keys=held)
            per_file = [(f, ks) for f, ks in per_file if f != path]
            bad.add(path)

    def _quarantine(self, path: str, reason: str, keys: list[str] | None) -> None:
        """Move a damaged file to ``<sweep>/quarantine/`` (path flattened) and say what it held."""
        self._own()
        rel = path[len(self.root) + 1:] if path.startswith(self.root + "/") else path.rsplit("/", 1)[-1]
        dest = f"{self.root}/{QUARANTINE_DIR}/{_now().strftime('%Y%m%dT%H%M%S')}-{rel.replace('/', '__')}"
        def move() -> None:
            self._make_parent(dest)
            self.fs.move(path, dest)

        self._guard_write(dest, move)
        entry = {"file": self._show(path), "to": self._show(dest), "reason": reason, "keys": keys}
        self.quarantined.append(entry)
        held = "keys unreadable" if keys is None else f"{len(keys)} key(s)"
        print(f"[sweep] repair: moved {self._show(path)} to {self._show(dest)} ({reason}; {held})", flush=True)

    def log_quarantined(self, plan: Sequence[Any]) -> list[str]:
        """After :meth:`record_plan`: the planned keys each quarantined data file held (read from
        it, or, when unreadable, the planned keys of its partition now missing), printed and
        written next to it as ``<file>.keys.txt``. Returns every such key."""
        out: list[str] = []
        for q in self.quarantined:
            keys = q["keys"]
            if keys is None:
                part = q["file"].split(f"/{TRAJ_DIR}/", 1)[-1].rsplit("/", 1)[0]
                keys = [p.key for p in plan if self._partition(p.model, p.method).endswith(part)
                        and p.key not in (self._keys or set())]
            else:
                keys = [k for k in keys if k not in (self._keys or set())]
            if not keys:
                continue
            out.extend(keys)
            shown = ", ".join(keys[:10]) + (f", ... ({len(keys)} in all)" if len(keys) > 10 else "")
            if q["keys"] is None:
                print(f"[sweep] repair: {q['file']} was unreadable; its keys are among the {len(keys)} planned "
                      f"key(s) of its partition not in the ledger, which run again: {shown}", flush=True)
            else:
                print(f"[sweep] repair: {q['file']} held {len(keys)} key(s) not committed elsewhere; "
                      f"they run again: {shown}", flush=True)
            dest = q["to"][len(self.fs.type_name) + 3:] if self.object_store else q["to"]
            try:
                with self.fs.open_output_stream(dest + ".keys.txt") as f:
                    f.write(("\n".join(keys) + "\n").encode())
            except (OSError, pa.ArrowException) as exc:
                print(f"[sweep] repair: could not write {q['to']}.keys.txt: {exc}", flush=True)
        return out
