"""The results store: a Parquet dataset per sweep, committed atomically, and resume.

Layout under ``<sweep.output_dir>/<sweep.name>/`` (any ``pyarrow.fs`` location: a
local directory, ``file:///...``, ``s3://bucket/prefix?endpoint_override=...``)::

    manifest.json                         config (resolved), fingerprint, plan summary, history
    plan.parquet                          every planned key (key, model, method, benchmark, problem_id, sample)
    trajectories/model=<m>/method=<x>/
        part-<seq>-<uuid>.parquet         one committed batch (rows: opteval.evalcore.records.LEDGER_SCHEMA)
        compact-<seq>-<uuid>.parquet      level 1: parts merged; footer metadata lists the files it replaces
        compact-<seq>-l<L>-<uuid>.parquet level L >= 2: every live file of lower levels merged
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

Why compaction, in tiers: at GPU commit rates a commit holds one or two rows per model x
method (issue 44 measured 1.37 rows a part file at the paper's eight models), so a
paper-scale sweep writes ~500,000 part files, and opening one costs about as much as
reading thousands of keys (one GET each on S3). When a partition has ``compact_every``
parts they are merged into a level-1 ``compact-`` file; when a level would reach
``compact_fan_in`` files, the compaction goes one level up instead and merges every live
file of the levels below (log-structured, like a base-``compact_fan_in`` counter). So a
partition holds fewer than ``compact_every`` parts plus ``compact_fan_in - 1`` files per
level, its live files grow like the logarithm of its rows, and each row is rewritten
once per level it climbs. A merge streams record batches (its memory is a batch, not
the partition). A compaction's footer names the files it replaces, and its level and
sequence number decide the same from names alone: a file is replaced by a ``compact-``
file of a higher level with a higher sequence number. The inputs are deleted afterwards;
a crash between the two leaves both, and the loader drops the replaced files (and
deletes them when writable), so no key is ever seen twice. Any other duplicate is a
real error naming both files.

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
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from opteval.evalcore.ledger_detail import encode_row
from opteval.evalcore.records import STATUS_ERROR, ledger_schema
from opteval.sweepcore import lease
from opteval.sweepcore.config import outcome_view
from opteval.sweepcore.ledger.keyset import KeySet
from opteval.sweepcore.ledger.manifest import ManifestMixin, _now, config_diff
from opteval.sweepcore.ledger.schema import (
    _COLUMNS,
    _FILE_RE,
    _REQUIRED,
    FORMATS,
    LEDGER_FORMAT,
    MANIFEST,
    OBJECT_STORES,
    REPLACES_META,
    TMP_DIR,
    TRAJ_DIR,
    file_level,
    format_of_schema,
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

# Compaction's shape ("Why compaction, in tiers" above). At GPU commit rates (6 rows a commit, one
# row a part file, over the paper's 33 model x method cells) these keep 171 live files at 60,000
# rows (measured by bench/bench_scale.py, docs/performance.md) and 297 at 589,116 (the same rule
# simulated), each row rewritten about once per level (log3 of a cell's parts / 6).
COMPACT_EVERY = 6  # parts that make a level-1 file
COMPACT_FAN_IN = 3  # a level never holds this many files: the next compaction goes up instead
MERGE_ROW_GROUP = 1024  # rows in a merged file's row group (one-row parts make one-row batches)
MERGE_GROUP_BYTES = 64 << 20  # or fewer, where the rows are large (paper-size transcripts)


class Ledger(ManifestMixin):
    """One sweep's Parquet dataset. Construct with :meth:`open`."""

    def __init__(self, fs: pafs.FileSystem, root: str, uri: str, *, read_only: bool, compact_every: int,
                 repair: bool = False, compact_fan_in: int = COMPACT_FAN_IN):
        if compact_every < 2 or compact_fan_in < 2:
            raise LedgerError(f"compact_every and compact_fan_in must be at least 2, got {compact_every} "
                              f"and {compact_fan_in}")
        self.fs = fs
        self.root = root  # the sweep directory, as a path in ``fs``
        self.uri = uri  # the same, as the user would type it
        self.trajectories_uri = join_uri(uri, TRAJ_DIR)  # the Parquet dataset, for messages and readers
        self.read_only = read_only
        self.compact_every = compact_every
        self.compact_fan_in = compact_fan_in
        self.object_store = fs.type_name in OBJECT_STORES
        self._keys: KeySet | None = None
        self._seq = 0
        # partition dir -> level -> its live files (level 0: parts); rewrite- files are in none
        self._levels: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
        self._manifest: dict[str, Any] | None = None
        self.format = LEDGER_FORMAT  # a new ledger's; an existing one's manifest sets its own on read
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
        compact_every: int = COMPACT_EVERY,
        compact_fan_in: int = COMPACT_FAN_IN,
        lease_stale_s: float | None = None,
        wait_for_lease: bool = False,
        repair: bool = False,
        new_format: int = LEDGER_FORMAT,
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
        ``new_format``: the format of a ledger created here (tests, tools); an existing ledger keeps
        the format its manifest states, whatever this says.
        """
        if new_format not in FORMATS:
            raise LedgerError(f"ledger format must be one of {list(FORMATS)}, got {new_format!r}")
        fs, base = open_filesystem(uri)
        root = f"{base}/{sweep_name}"
        led = cls(fs, root, join_uri(uri, sweep_name), read_only=read_only, compact_every=compact_every,
                  repair=repair, compact_fan_in=compact_fan_in)
        led.format = new_format
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
        if old is None:  # new, or its manifest quarantined: the format its data files hold, if any
            led.format = led._files_format() or led.format
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
        led = cls(fs, f"{base}/{sweep_name}", join_uri(uri, sweep_name), read_only=True, compact_every=COMPACT_EVERY)
        if led.manifest() is None:
            raise LedgerError(f"no sweep {sweep_name!r} at {led.uri} (no {MANIFEST})")
        led._load()
        return led

    # ---- reading ----
    def _files_format(self) -> int | None:
        """The format of the ledger's data files (the first readable one), or None without any."""
        for f in self._list():
            try:
                return format_of_schema(pq.read_schema(f, filesystem=self.fs))
            except (pa.ArrowException, OSError, ValueError):
                continue
        return None

    @property
    def schema(self) -> pa.Schema:
        """The row schema of this ledger's format (``opteval.evalcore.records.ledger_schema``)."""
        return ledger_schema(self.format)

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
        """Files a compaction already merged: in its directory, a file with a lower level and a
        lower sequence number than some ``compact-`` file (a level-L compaction merges every
        live file of the levels below L, and later files get higher numbers); and every file
        older than the directory's newest ``rewrite-`` file. Decided from names alone, so a
        resume reads no extra footers; the merged file's footer (``opteval.replaces``) lists
        the same names for audit."""
        newest: dict[str, dict[int, int]] = defaultdict(dict)  # dir -> level -> newest compact- seq
        rewrite: dict[str, int] = {}  # supersede_errors: a rewrite- file replaces every older file
        parsed = []
        for f in files:
            d, name = f.rsplit("/", 1)
            m = _FILE_RE.match(name)
            if not m:
                continue
            kind, seq = m.group(1), int(m.group(2))
            if kind == "rewrite":
                rewrite[d] = max(rewrite.get(d, -1), seq)
                parsed.append((f, d, -1, seq))
                continue
            level = file_level(m)
            parsed.append((f, d, level, seq))
            if kind == "compact":
                newest[d][level] = max(newest[d].get(level, -1), seq)

        def above(d: str, level: int) -> int:
            return max((s for lv, s in newest[d].items() if lv > level), default=-1)

        return {f for f, d, level, seq in parsed
                if seq < rewrite.get(d, -1) or (level >= 0 and seq < above(d, level))}

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
                if m.group(1) != "rewrite":
                    self._levels[f.rsplit("/", 1)[0]][file_level(m)].append(f)

    def _show(self, path: str) -> str:
        """A path in ``fs`` as the user would type it."""
        return f"{self.fs.type_name}://{path}" if self.object_store else path

    def committed_keys(self) -> set[str]:
        """Keys committed on disk (at open) or by this process since, as a Python set (a copy:
        ~130 bytes a key; a driver takes :meth:`committed_array` instead)."""
        assert self._keys is not None
        return set(self._keys)

    def committed_array(self) -> pa.Array:
        """The same keys as one Arrow string array, held by the ledger already when nothing was
        committed or released since open (no copy): what ``plan.remaining`` takes."""
        assert self._keys is not None
        return self._keys.to_arrow()

    def is_committed(self, key: str) -> bool:
        assert self._keys is not None
        return key in self._keys

    def read_table(self, columns: list[str] | None = None, filter: Any = None) -> pa.Table:
        """All committed rows; schemas unified with the format's (:attr:`schema`, its columns first;
        decode the detail columns and ``error`` with ``opteval.evalcore.ledger_detail``). Pass the
        ``columns`` a reader uses (``schema.columns_without(*DETAIL_COLUMNS)`` for one that scores):
        Parquet then never reads the others, and the transcripts are most of a ledger's bytes.
        ``filter``: a ``pyarrow.compute`` expression on the rows (``pc.field("method").isin([...])``)."""
        dataset = self._dataset()
        if dataset is None:
            return self.schema.empty_table() if columns is None else self.schema.empty_table().select(columns)
        return dataset.to_table(columns=columns, filter=filter)

    def scan(self, columns: list[str], batch_rows: int = 8192, filter: Any = None) -> Iterator[pa.RecordBatch]:
        """The committed rows' ``columns`` one record batch at a time, for readers that aggregate as
        they go (their memory then depends on the batch, not on the ledger's size). ``filter`` as in
        :meth:`read_table`.

        One scanner per file, in the files' order. Why: one scanner over the whole dataset reads
        ahead of a slow consumer until its queue holds about 1 GiB of decoded batches (Acero's
        back-pressure mark), whatever ``batch_readahead`` says. A report reducing 589,116 rows
        peaked at 6.3 GB with it; a file's scanner holds at most that file."""
        dataset = self._dataset()
        if dataset is None:
            return
        for fragment in dataset.get_fragments():
            yield from fragment.to_batches(schema=dataset.schema, columns=columns, filter=filter,
                                           batch_size=batch_rows, batch_readahead=1)

    def _dataset(self) -> ds.Dataset | None:
        files = self.files()
        if not files:
            return None
        factory = ds.FileSystemDatasetFactory(self.fs, files, ds.ParquetFileFormat())
        schema = pa.unify_schemas([self.schema, factory.inspect(fragments=None)], promote_options="permissive")
        return ds.dataset(files, schema=schema, format="parquet", filesystem=self.fs)

    # ---- writing ----
    def _writable(self) -> None:
        if self.read_only:
            raise LedgerError(f"ledger {self.uri} was opened read-only")

    def commit(self, rows: list[dict[str, Any]]) -> list[str]:
        """Write ``rows`` atomically (one file per model x method). Returns the paths.

        The encode boundary: ``rows`` hold logical values (``opteval.sweepcore.ledger.rows``), encoded
        here for this ledger's format (``opteval.evalcore.ledger_detail.encode_row``), so the file
        has exactly :attr:`schema`. Raises DuplicateKeyError, before writing anything, when a key is already
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
            table = pa.Table.from_pylist([encode_row(r, self.format) for r in group], schema=self.schema)
            d = self._partition(model, method)
            self._seq += 1
            path = f"{d}/part-{self._seq:08d}-{uuid.uuid4().hex}.parquet"
            self._atomic_write_table(table, path)
            self._keys.update(r["key"] for r in group)
            self._levels[d][0].append(path)
            written.append(path)
            if len(self._levels[d][0]) >= self.compact_every:
                self._compact_dir(d)
        return written

    def _partition(self, model: str, method: str) -> str:
        return f"{self.root}/{TRAJ_DIR}/model={model}/method={method}"

    def compact(self, min_files: int = 2) -> int:
        """Merge each partition's parts (where it has at least ``min_files``), going up a level
        where one is full; returns the files merged."""
        self._writable()
        n = 0
        for d, levels in list(self._levels.items()):
            if len(levels[0]) >= min_files:
                n += self._compact_dir(d)
        return n

    def live_levels(self) -> dict[str, dict[int, int]]:
        """Per partition directory, how many live files each level holds (0: parts), for benches."""
        return {d: {lv: len(fs) for lv, fs in sorted(levels.items()) if fs} for d, levels in self._levels.items()}

    def _compact_dir(self, d: str) -> int:
        """Merge ``d``'s parts into level 1, or, where a level would reach ``compact_fan_in``
        files, every live file below the first level with room into that level. Returns the
        files merged."""
        self._own()
        levels = self._levels[d]
        level = 1
        while len(levels[level]) + 1 >= self.compact_fan_in:
            level += 1
        inputs = sorted(f for lv in range(level) for f in levels[lv])
        self._seq += 1
        tag = "" if level == 1 else f"-l{level}"
        path = f"{d}/compact-{self._seq:08d}{tag}-{uuid.uuid4().hex}.parquet"
        self._merge_into(inputs, path)
        for p in inputs:
            self._delete(p)
        for lv in range(level):
            levels[lv] = []
        levels[level].append(path)
        return len(inputs)

    def _merge_into(self, inputs: list[str], final: str, filter: Any = None) -> None:
        """Stream ``inputs``' rows (those ``filter`` keeps) into one new file published at
        ``final``, whose footer lists the inputs. Memory: a few batches of rows, whatever the
        inputs' size; row groups of ``MERGE_ROW_GROUP`` rows (one-row parts would otherwise
        make one-row groups)."""
        meta = {REPLACES_META: json.dumps([p.rsplit("/", 1)[-1] for p in inputs]).encode()}
        schema = self.schema.with_metadata(meta)
        dataset = ds.dataset(inputs, schema=self.schema, format="parquet", filesystem=self.fs)
        tmp = self._tmp_path(final)

        def write() -> None:
            self._make_parent(final)
            self._make_parent(tmp)
            with pq.ParquetWriter(tmp, schema, filesystem=self.fs, compression="zstd") as out:
                held: list[pa.RecordBatch] = []
                rows = nbytes = 0
                for batch in dataset.to_batches(filter=filter, batch_size=MERGE_ROW_GROUP,
                                                batch_readahead=1, fragment_readahead=1):
                    held.append(batch)
                    rows += batch.num_rows
                    nbytes += batch.nbytes
                    if rows >= MERGE_ROW_GROUP or nbytes >= MERGE_GROUP_BYTES:
                        out.write_table(pa.Table.from_batches(held, schema=self.schema))
                        held, rows, nbytes = [], 0, 0
                if held:
                    out.write_table(pa.Table.from_batches(held, schema=self.schema))
            self._publish(tmp, final)

        self._guard_write(final, write, tmp=tmp)

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

    def _atomic_write_tables(self, schema: pa.Schema, tables: Iterable[pa.Table], final: str) -> None:
        """One Parquet file from ``tables`` written one after another (a row group or more
        each), published whole as :meth:`_atomic_write_table` does: only one piece in memory."""
        tmp = self._tmp_path(final)

        def write() -> None:
            self._make_parent(final)
            self._make_parent(tmp)
            with pq.ParquetWriter(tmp, schema, filesystem=self.fs, compression="zstd") as writer:
                for table in tables:
                    writer.write_table(table)
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
        by_cell: dict[tuple[str, str], list[str]] = defaultdict(list)
        for m, x, k in zip(errs.column("model").to_pylist(), errs.column("method").to_pylist(),
                           errs.column("key").to_pylist()):
            by_cell[(m, x)].append(k)
        for (model, method), gone in sorted(by_cell.items()):
            d = self._partition(model, method)
            olds = [f for f in files if f.rsplit("/", 1)[0] == d]
            self._seq += 1
            path = f"{d}/rewrite-{self._seq:08d}-{uuid.uuid4().hex}.parquet"
            self._own()
            self._merge_into(olds, path, filter=pa.compute.field("status") != STATUS_ERROR)
            for p in olds:
                self._delete(p)
            self._levels[d] = defaultdict(list)
            self._keys.difference_update(gone)
            released.extend(gone)
        return released
