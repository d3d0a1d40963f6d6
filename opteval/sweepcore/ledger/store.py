"""The results store: a Parquet dataset per sweep, committed atomically, and resume.

Layout under ``<sweep.output_dir>/<sweep.name>/`` (any ``pyarrow.fs`` location: a
local directory, ``file:///...``, ``s3://bucket/prefix?endpoint_override=...``)::

    manifest.json                         config (resolved), fingerprint, plan summary, history
    plan.parquet                          every planned key (key, model, method, benchmark, problem_id, sample)
    trajectories/model=<m>/method=<x>/
        part-<seq>-<uuid>.parquet         one committed batch (rows: opteval.evalcore.records.LEDGER_SCHEMA)
        compact-<seq>-<uuid>.parquet      many batches merged; footer metadata lists the parts it replaces
        rewrite-<seq>-<uuid>.parquet      sweep.retry_errors: the partition without its error rows
    lease.json                            the writer lease (opteval.sweepcore.lease)
    quarantine/                           damaged files moved aside by sweep.repair=true
    _tmp/                                 object stores only: uploads before their final move

Why the commit is atomic: a batch is written whole under a temporary name, then
moved to its final name. On a local or shared POSIX filesystem the temporary file
is a dotfile in the same directory and the move is a ``rename``, which is atomic.
On object stores (``s3``, ``gcs``) a move is copy + delete; the upload goes to
``_tmp/`` and the final object appears whole when the server-side copy completes
(an object PUT/copy is all-or-nothing). Readers ignore every path component that
starts with ``.`` or ``_``, so a crash at any point never leaves a partial file
visible: at worst a stray temporary, removed when the ledger is next opened for
writing. (Process crashes are covered; surviving power loss would also need an
fsync, which pyarrow's filesystems do not expose.)

Why compaction: a paper-scale sweep commits ~18,000 small batches, and opening one
file costs about as much as reading thousands of keys. When a partition has
``compact_every`` parts, they are merged into one ``compact-`` file whose footer
names the parts it replaces; the parts are deleted afterwards. A crash between
the two leaves both, and the loader drops the replaced parts (and deletes them when
writable), so no key is ever seen twice. Any other duplicate is a real error
naming both files.

One driver writes a sweep at a time: a driver opens the ledger with a lease
(``opteval.sweepcore.lease``: ``lease.json`` in the sweep directory) and every write or delete
checks it still holds it, so compaction and cleanup never remove another driver's
files. Damage is named, never a traceback: a file that cannot be read stops the open
with :class:`DamagedFileError`; with ``repair`` it is moved into ``quarantine/`` and
its keys run again. A write that fails (disk full, permissions, the object store)
raises :class:`CommitError` naming the path and the cause; what was committed before
stays valid. No Ray import here.
"""
from __future__ import annotations

import json
import os
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from opteval.evalcore.records import LEDGER_SCHEMA, STATUS_ERROR
from opteval.sweepcore import lease
from opteval.sweepcore.config import outcome_view
from opteval.sweepcore.ledger.manifest import ManifestMixin, _now, config_diff
from opteval.sweepcore.ledger.schema import (
    _COLUMNS,
    _FILE_RE,
    _REQUIRED,
    MANIFEST,
    OBJECT_STORES,
    REPLACES_META,
    TMP_DIR,
    TRAJ_DIR,
)
from opteval.sweepcore.ledger_errors import CommitError, ConfigChangedError, DuplicateKeyError, LedgerError, _cause

# -- filesystems ------------------------------------------------------------------------------


def open_filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, path)`` for a local path, ``file://`` or object-store URI.

    A plain path is made absolute (pyarrow wants absolute local paths). S3 options go
    in the URI's query (``?endpoint_override=host:port&scheme=http``) or the usual
    AWS environment variables.
    """
    if "://" in uri:
        fs, path = pafs.FileSystem.from_uri(uri)
        return fs, path.rstrip("/")
    return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(uri))


def join_uri(uri: str, name: str) -> str:
    """``uri`` + ``/name``, keeping a ``?query`` (S3 options) at the end where it belongs."""
    base, sep, query = uri.partition("?")
    return f"{base.rstrip('/')}/{name}{sep}{query}"


def _is_hidden(rel: str) -> bool:
    return any(part.startswith((".", "_")) for part in rel.split("/"))


# -- the ledger ------------------------------------------------------------------------------------


class Ledger(ManifestMixin):
    """One sweep's Parquet dataset. Construct with :meth:`open`."""

    def __init__(self, fs: pafs.FileSystem, root: str, uri: str, *, read_only: bool, compact_every: int,
                 repair: bool = False):
        self.fs = fs
        self.root = root  # the sweep directory, as a path in ``fs``
        self.uri = uri  # the same, as the user would type it
        self.trajectories_uri = join_uri(uri, TRAJ_DIR)  # the Parquet dataset, for messages and readers
        self.read_only = read_only
        self.compact_every = compact_every
        self.object_store = fs.type_name in OBJECT_STORES
        self._keys: set[str] | None = None
        self._seq = 0
        self._small: dict[str, list[str]] = defaultdict(list)  # partition dir -> part files
        self._manifest: dict[str, Any] | None = None
        self.repair = repair
        self.lease: Any = None  # opteval.sweepcore.lease.Lease while this driver holds the sweep
        self.quarantined: list[dict[str, Any]] = []  # {"file", "to", "reason", "keys" (None: unreadable)}

    # ---- opening ----
    @classmethod
    def open(
        cls,
        uri: str,
        sweep_name: str,
        resolved_config: dict[str, Any],
        fingerprint: str,
        allow_config_change: bool = False,
        *,
        read_only: bool = False,
        compact_every: int = 64,
        lease_stale_s: float | None = None,
        wait_for_lease: bool = False,
        repair: bool = False,
    ) -> Ledger:
        """Open (or create) ``<uri>/<sweep_name>`` for this config.

        A sweep that exists with another fingerprint is refused with a
        :class:`ConfigChangedError` listing what changed (dotted paths over the
        outcome-relevant config), unless ``allow_config_change``. ``read_only``
        (``plan_only``) checks and reads but writes nothing.

        ``lease_stale_s`` (the driver always passes it): take the sweep's writer lease
        first, refusing with :class:`opteval.sweepcore.lease.LeaseHeldError` while another live
        driver holds it (``wait_for_lease``: wait instead). ``repair``: move damaged
        files into ``quarantine/`` instead of refusing (:class:`DamagedFileError`).
        """
        fs, base = open_filesystem(uri)
        root = f"{base}/{sweep_name}"
        led = cls(fs, root, join_uri(uri, sweep_name), read_only=read_only, compact_every=compact_every,
                  repair=repair)
        if not read_only and lease_stale_s is not None:
            led._take_lease(sweep_name, float(lease_stale_s), wait_for_lease)
        try:
            led._open_checked(sweep_name, resolved_config, fingerprint, allow_config_change)
        except BaseException:
            led.close()
            raise
        return led

    def _take_lease(self, sweep_name: str, stale_s: float, wait: bool) -> None:
        try:
            self.fs.create_dir(self.root, recursive=True)
        except (OSError, pa.ArrowException) as exc:
            raise CommitError(f"cannot create the sweep directory {self.uri}: {exc}") from exc
        self.lease = lease.acquire(self.fs, self.root, self.uri, f"sweep {sweep_name!r} at {self.uri}", stale_s, wait)

    def close(self) -> None:
        """Release the writer lease (if held). Idempotent."""
        if self.lease is not None:
            self.lease.release()
            self.lease = None

    def _own(self) -> None:
        """Before any write or delete: this driver still holds the lease (when it took one)."""
        if self.lease is not None:
            self.lease.check()

    def _open_checked(self, sweep_name: str, resolved_config: dict[str, Any], fingerprint: str,
                      allow_config_change: bool) -> None:
        led, fs, root, read_only = self, self.fs, self.root, self.read_only
        old = led._manifest_or_repair()
        changes: list[str] = []
        if old is not None and old.get("fingerprint") != fingerprint:
            changes = config_diff(outcome_view(old.get("config") or {}), outcome_view(resolved_config))
            if not changes:
                changes = [f"fingerprint: {old.get('fingerprint')} -> {fingerprint}"]
            if not allow_config_change:
                shown = changes[:25] + ([f"... and {len(changes) - 25} more"] if len(changes) > 25 else [])
                raise ConfigChangedError(
                    f"sweep {sweep_name!r} at {led.uri} was run with a different configuration:\n  "
                    + "\n  ".join(shown)
                    + "\nUse another sweep.name, or sweep.allow_config_change=true to continue it "
                    "(trajectories whose settings changed get new keys and run again)."
                )
        if not read_only:
            led._guard_write(f"{led.uri}/", lambda: fs.create_dir(root, recursive=True))
            led._check_plan_file()
            led._write_manifest(old, resolved_config, fingerprint, changes, sweep_name)
            led._clean_tmp()
        led._load()

    @classmethod
    def open_existing(cls, uri: str, sweep_name: str) -> Ledger:
        """Read-only access to an existing sweep (reports), without a config check."""
        fs, base = open_filesystem(uri)
        led = cls(fs, f"{base}/{sweep_name}", join_uri(uri, sweep_name), read_only=True, compact_every=64)
        if led.manifest() is None:
            raise LedgerError(f"no sweep {sweep_name!r} at {led.uri} (no {MANIFEST})")
        led._load()
        return led

    # ---- reading ----
    def _list(self) -> list[str]:
        sel = pafs.FileSelector(f"{self.root}/{TRAJ_DIR}", recursive=True, allow_not_found=True)
        base = len(self.root) + len(TRAJ_DIR) + 2
        out = []
        for info in self.fs.get_file_info(sel):
            if info.type != pafs.FileType.File or not info.path.endswith(".parquet"):
                continue
            if _is_hidden(info.path[base:]):
                continue
            out.append(info.path)
        return sorted(out)

    def files(self) -> list[str]:
        """Visible, live data files (replaced parts dropped)."""
        files = self._list()
        replaced = self._replaced(files)
        return [f for f in files if f not in replaced]

    def _replaced(self, files: list[str]) -> set[str]:
        """Parts a compaction already merged: every ``part-`` in a directory with a lower
        sequence number than that directory's newest ``compact-`` file (a compaction
        merges all live parts of its directory, and later parts get higher numbers).
        Decided from names alone, so a resume reads no extra footers; the compacted
        file's footer (``opteval.replaces``) lists the same names for audit."""
        newest: dict[str, int] = {}
        rewrite: dict[str, int] = {}  # supersede_errors: a rewrite- file replaces every older file
        parsed = []
        for f in files:
            d, name = f.rsplit("/", 1)
            m = _FILE_RE.match(name)
            if m:
                parsed.append((f, d, m.group(1), int(m.group(2))))
                if m.group(1) in ("compact", "rewrite"):
                    newest[d] = max(newest.get(d, -1), int(m.group(2)))
                if m.group(1) == "rewrite":
                    rewrite[d] = max(rewrite.get(d, -1), int(m.group(2)))
        return {f for f, d, kind, seq in parsed
                if (kind == "part" and seq < newest.get(d, -1)) or seq < rewrite.get(d, -1)}

    def _load(self) -> None:
        files = self._list()
        replaced = self._replaced(files)
        if replaced and not self.read_only:
            for f in replaced:  # a compaction that crashed before deleting its inputs
                self._delete(f)
        live = [f for f in files if f not in replaced]
        self._keys, bad = self._read_keys_checked(live)
        live = [f for f in live if f not in bad]
        for f in live:
            m = _FILE_RE.match(f.rsplit("/", 1)[-1])
            if m:
                self._seq = max(self._seq, int(m.group(2)))
                if m.group(1) == "part":
                    self._small[f.rsplit("/", 1)[0]].append(f)

    def _read_keys(self, files: list[str]) -> set[str]:
        return self._read_keys_checked(files)[0]

    def _show(self, path: str) -> str:
        """A path in ``fs`` as the user would type it."""
        return f"{self.fs.type_name}://{path}" if self.object_store else path

    def committed_keys(self) -> set[str]:
        """Keys committed on disk (at open) or by this process since. A copy."""
        assert self._keys is not None
        return set(self._keys)

    def is_committed(self, key: str) -> bool:
        assert self._keys is not None
        return key in self._keys

    def read_table(self, columns: list[str] | None = None, filter: Any = None) -> pa.Table:
        """All committed rows; schemas unified with ``LEDGER_SCHEMA`` (its columns first). Pass the
        ``columns`` a reader uses (``schema.columns_without(*DETAIL_COLUMNS)`` for one that scores):
        Parquet then never reads the others, and the transcripts are most of a ledger's bytes.
        ``filter``: a ``pyarrow.compute`` expression on the rows (``pc.field("method").isin([...])``)."""
        dataset = self._dataset()
        if dataset is None:
            return LEDGER_SCHEMA.empty_table() if columns is None else LEDGER_SCHEMA.empty_table().select(columns)
        return dataset.to_table(columns=columns, filter=filter)

    def scan(self, columns: list[str], batch_rows: int = 8192, filter: Any = None) -> Iterator[pa.RecordBatch]:
        """The committed rows' ``columns`` one record batch at a time, for readers that aggregate as
        they go (their memory then depends on the batch, not on the ledger's size). Read ahead is
        kept to one fragment and one batch, so the batches in flight stay few. ``filter`` as in
        :meth:`read_table`."""
        dataset = self._dataset()
        if dataset is None:
            return
        yield from dataset.to_batches(columns=columns, filter=filter, batch_size=batch_rows,
                                      batch_readahead=1, fragment_readahead=1)

    def _dataset(self) -> ds.Dataset | None:
        files = self.files()
        if not files:
            return None
        factory = ds.FileSystemDatasetFactory(self.fs, files, ds.ParquetFileFormat())
        schema = pa.unify_schemas([LEDGER_SCHEMA, factory.inspect(fragments=None)], promote_options="permissive")
        return ds.dataset(files, schema=schema, format="parquet", filesystem=self.fs)

    # ---- writing ----
    def _writable(self) -> None:
        if self.read_only:
            raise LedgerError(f"ledger {self.uri} was opened read-only")

    def commit(self, rows: list[dict[str, Any]]) -> list[str]:
        """Write ``rows`` atomically (one file per model x method). Returns the paths.

        Raises DuplicateKeyError, before writing anything, when a key is already
        committed or appears twice in ``rows``.
        """
        self._writable()
        assert self._keys is not None
        if not rows:
            return []
        self._own()
        seen: set[str] = set()
        now = _now()
        groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for i, row in enumerate(rows):
            extra = set(row) - _COLUMNS
            if extra:
                raise LedgerError(f"rows[{i}]: unknown column(s) {sorted(extra)}")
            missing = [c for c in _REQUIRED if row.get(c) is None]
            if missing:
                raise LedgerError(f"rows[{i}] (key {row.get('key')!r}): required column(s) {missing} missing")
            key = row["key"]
            if key in self._keys:
                raise DuplicateKeyError(f"ledger {self.uri}: key {key!r} is already committed")
            if key in seen:
                raise DuplicateKeyError(f"key {key!r} appears twice in one commit")
            seen.add(key)
            if row.get("committed_at") is None:
                row = {**row, "committed_at": now}
            groups[(row["model"], row["method"])].append(row)
        written = []
        for (model, method), group in groups.items():
            table = pa.Table.from_pylist(group, schema=LEDGER_SCHEMA)
            d = self._partition(model, method)
            self._seq += 1
            path = f"{d}/part-{self._seq:08d}-{uuid.uuid4().hex}.parquet"
            self._atomic_write_table(table, path)
            self._keys.update(r["key"] for r in group)
            self._small[d].append(path)
            written.append(path)
            if len(self._small[d]) >= self.compact_every:
                self._compact_dir(d)
        return written

    def _partition(self, model: str, method: str) -> str:
        return f"{self.root}/{TRAJ_DIR}/model={model}/method={method}"

    def compact(self, min_files: int = 2) -> int:
        """Merge each partition's small parts (at least ``min_files``); returns files merged."""
        self._writable()
        n = 0
        for d, parts in list(self._small.items()):
            if len(parts) >= min_files:
                n += len(parts)
                self._compact_dir(d)
        return n

    def _compact_dir(self, d: str) -> None:
        self._own()
        parts = sorted(self._small[d])
        table = ds.dataset(parts, schema=LEDGER_SCHEMA, format="parquet", filesystem=self.fs).to_table()
        meta = {REPLACES_META: json.dumps([p.rsplit("/", 1)[-1] for p in parts]).encode()}
        self._seq += 1
        path = f"{d}/compact-{self._seq:08d}-{uuid.uuid4().hex}.parquet"
        self._atomic_write_table(table.replace_schema_metadata(meta), path)
        for p in parts:
            self._delete(p)
        self._small[d] = []

    def _delete(self, path: str) -> None:
        """Deletes happen only under this driver's verified lease (never another driver's files)."""
        self._own()
        self._guard_write(path, lambda: self.fs.delete_file(path), "cannot delete")

    def _tmp_path(self, final: str) -> str:
        if self.object_store:
            return f"{self.root}/{TMP_DIR}/{uuid.uuid4().hex}.tmp"
        d, name = final.rsplit("/", 1)
        return f"{d}/.{name}.{uuid.uuid4().hex[:8]}.tmp"

    def _make_parent(self, path: str) -> None:
        """Local filesystems need the directory; object stores have none (creating the
        markers there would cost a HEAD and one PUT per path level on every commit)."""
        if not self.object_store:
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)

    def _atomic_write_table(self, table: pa.Table, final: str) -> None:
        tmp = self._tmp_path(final)

        def write() -> None:
            self._make_parent(final)
            self._make_parent(tmp)
            pq.write_table(table, tmp, filesystem=self.fs, compression="zstd")
            self._publish(tmp, final)

        self._guard_write(final, write, tmp=tmp)

    def _put_json(self, name: str, obj: Any) -> None:
        self._own()
        final = f"{self.root}/{name}"
        tmp = self._tmp_path(final)

        def write() -> None:
            self._make_parent(tmp)
            with self.fs.open_output_stream(tmp) as f:
                f.write(json.dumps(obj, indent=1, default=str).encode())
            self._publish(tmp, final)

        self._guard_write(final, write, tmp=tmp)

    def _guard_write(self, path: str, fn: Any, verb: str = "cannot write", tmp: str | None = None) -> Any:
        """Run a storage write; a failure becomes a :class:`CommitError` naming ``path`` and the
        cause (the temporary is removed; the final name was never touched)."""
        try:
            return fn()
        except (OSError, pa.ArrowException) as exc:
            if tmp is not None:
                try:
                    self.fs.delete_file(tmp)
                except Exception:
                    pass
            raise CommitError(f"{verb} {self._show(path)}: {_cause(exc)}") from exc

    def _publish(self, tmp: str, final: str) -> None:
        """The atomic step (a rename locally; a server-side copy on object stores)."""
        self.fs.move(tmp, final)

    def _clean_tmp(self) -> None:
        """Drop temporaries a crashed writer left (under this driver's lease: no other writes)."""
        sel = pafs.FileSelector(self.root, recursive=True, allow_not_found=True)
        for info in self.fs.get_file_info(sel):
            if info.type == pafs.FileType.File and info.path.endswith(".tmp") and \
                    not info.path.rsplit("/", 1)[-1].startswith("lease.json"):
                self._delete(info.path)

    # ---- re-running error rows ----
    def supersede_errors(self) -> list[str]:
        """``sweep.retry_errors``: drop committed ``status=error`` rows so those keys run again.

        Each partition holding one is rewritten whole into a new ``rewrite-`` file without
        them; a ``rewrite-`` file replaces every older file of its directory (decided from
        names, as for compaction; its footer lists them), which are deleted after it is
        published; a crash in between is resolved at the next open.
        The old row is thus superseded by the new run's row, never duplicated.
        Returns the keys released."""
        self._writable()
        assert self._keys is not None
        files = self.files()
        if not files:
            return []
        table = self.read_table(columns=["key", "status", "model", "method"])
        errs = table.filter(pa.compute.equal(table.column("status"), STATUS_ERROR))
        if errs.num_rows == 0:
            return []
        released: list[str] = []
        for model, method in sorted(set(zip(errs.column("model").to_pylist(), errs.column("method").to_pylist()))):
            d = self._partition(model, method)
            olds = [f for f in files if f.rsplit("/", 1)[0] == d]
            full = ds.dataset(olds, schema=LEDGER_SCHEMA, format="parquet", filesystem=self.fs).to_table()
            is_err = pa.compute.equal(full.column("status"), STATUS_ERROR)
            keep = full.filter(pa.compute.invert(is_err))
            gone = full.filter(is_err).column("key").to_pylist()
            meta = {REPLACES_META: json.dumps([p.rsplit("/", 1)[-1] for p in olds]).encode()}
            self._seq += 1
            path = f"{d}/rewrite-{self._seq:08d}-{uuid.uuid4().hex}.parquet"
            self._own()
            self._atomic_write_table(keep.replace_schema_metadata(meta), path)
            for p in olds:
                self._delete(p)
            self._small[d] = []
            self._keys.difference_update(gone)
            released.extend(gone)
        return released
