"""One writer per sweep: a lease file in the sweep's directory.

Why: two drivers on one ``sweep.name`` both believed they owned the ledger, wrote the
same keys twice and deleted each other's files. The lease is ``<sweep>/lease.json``
holding the owner (a random id), host, pid, when it was taken and its last heartbeat.

- Local and shared POSIX filesystems: taken by linking a fully written temporary file into
  place (``link`` fails if the lease exists, and no reader ever sees it half written),
  beaten by write-temp-then-rename after checking the file is still ours.
- Object stores (S3): a conditional PUT (``If-None-Match: *`` to take it, ``If-Match:
  <etag>`` to beat or take over a stale one) through boto3, since pyarrow's filesystem
  has no conditional write. Other object stores (GCS): no lease, with a warning.

A lease whose heartbeat is older than ``stale_s`` is taken over; so is one held by a
dead process on this same host (a killed driver resumes at once). Clocks of different
hosts are assumed to agree to well within ``stale_s``. A holder that finds its lease
gone or taken stops writing (:class:`LeaseLostError` on the next commit).

No Ray import here.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from opteval.sweepcore.ledger_errors import LedgerError

LEASE_FILE = "lease.json"


class LeaseHeldError(LedgerError):
    """Another live driver holds the sweep's lease."""


class LeaseLostError(LedgerError):
    """This driver's lease was taken over or removed: it must stop writing."""


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def _age_s(info: dict[str, Any]) -> float:
    try:
        beat = _dt.datetime.fromisoformat(str(info.get("heartbeat_at")))
    except ValueError:
        return float("inf")
    return (_now() - beat).total_seconds()


def _pid_dead_here(info: dict[str, Any]) -> bool:
    """The holder ran on this host and its process is gone (a crashed or killed driver)."""
    if info.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(info.get("pid", -1)), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, OverflowError):
        return False
    return False


def describe(info: dict[str, Any]) -> str:
    age = _age_s(info)
    ago = f"{age:.0f} s ago" if age != float("inf") else "never"
    return (f"pid {info.get('pid')} on {info.get('host')} (lease {str(info.get('owner'))[:8]}, "
            f"taken {info.get('acquired_at')}, last heartbeat {ago} at {info.get('heartbeat_at')})")


# -- stores: create-if-absent, read, replace-if-unchanged, delete --------------------------


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class LocalStore:
    """The lease file on a POSIX filesystem (local disk, NFS, a shared volume)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.where = path

    def create(self, body: bytes) -> Any:
        """Write the whole lease to a temporary file, then link it into place: the link either
        fails (someone holds it) or shows a complete lease to every reader at once. An exclusive
        create written afterwards left a moment where a reader saw an empty file, judged it
        stale and took it over (both contenders then "held" it)."""
        tmp = self._write_tmp(body)
        try:
            os.link(tmp, self.path)
        except FileExistsError:
            return None
        except OSError:  # a filesystem without hard links: exclusive create, written after
            return self._create_in_place(body)
        finally:
            _unlink_quietly(tmp)
        info = json.loads(body)
        return info["owner"], info["heartbeat_at"]

    def _write_tmp(self, body: bytes) -> str:
        tmp = f"{self.path}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            _unlink_quietly(tmp)
            raise
        return tmp

    def _create_in_place(self, body: bytes) -> Any:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return None
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        info = json.loads(body)
        return info["owner"], info["heartbeat_at"]

    def read(self) -> tuple[dict[str, Any], Any] | None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
                mtime = os.fstat(f.fileno()).st_mtime
        except FileNotFoundError:
            return None
        try:
            info = json.loads(data)
        except ValueError:
            # Empty or torn: judged by the file's age, so a lease still being written (the
            # in-place fallback above) is held, and one a crash left garbled goes stale.
            when = _dt.datetime.fromtimestamp(mtime, _dt.UTC).isoformat()
            info = {"owner": "?", "host": "?", "pid": "?", "heartbeat_at": when}
            return info, ("?", "unreadable")
        return info, (info.get("owner"), info.get("heartbeat_at"))

    def replace(self, body: bytes, token: Any) -> Any:
        cur = self.read()
        if cur is None or cur[1] != token:
            return None
        tmp = self._write_tmp(body)
        try:
            os.replace(tmp, self.path)
        except OSError:
            _unlink_quietly(tmp)
            raise
        info = json.loads(body)
        return info.get("owner"), info.get("heartbeat_at")

    def take_over(self, body: bytes, token: Any) -> Any:
        """Move the stale file aside (one contender wins the rename), check it was the stale
        one we judged, then create ours exclusively."""
        aside = f"{self.path}.stale-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return self.create(body)
        with open(aside, "rb") as f:
            data = f.read()
        try:
            moved = json.loads(data)
            same = (moved.get("owner"), moved.get("heartbeat_at")) == token
        except ValueError:
            same = token == ("?", "unreadable")
        if not same:  # we moved a fresh lease: put it back (exclusively) and lose
            try:
                os.link(aside, self.path)
            except FileExistsError:
                pass
            os.unlink(aside)
            return None
        os.unlink(aside)
        return self.create(body)

    def delete(self, token: Any) -> None:
        cur = self.read()
        if cur is not None and cur[1] == token:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


class S3Store:
    """The lease object on S3, written with conditional PUTs (boto3)."""

    def __init__(self, bucket: str, key: str, client: Any) -> None:
        self.bucket, self.key, self.client = bucket, key, client
        self.where = f"s3://{bucket}/{key}"

    def _put(self, body: bytes, **cond: str) -> Any:
        # deferred: botocore comes with boto3; only S3 leases use it
        from botocore.exceptions import ClientError

        try:
            return self.client.put_object(Bucket=self.bucket, Key=self.key, Body=body, **cond)["ETag"]
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409"):
                return None
            raise

    def create(self, body: bytes) -> Any:
        return self._put(body, IfNoneMatch="*")

    def read(self) -> tuple[dict[str, Any], Any] | None:
        # deferred: botocore comes with boto3; only S3 leases use it
        from botocore.exceptions import ClientError

        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise
        data = obj["Body"].read()
        try:
            info = json.loads(data)
        except ValueError:
            info = {"owner": "?", "host": "?", "pid": "?", "heartbeat_at": "unreadable"}
        return info, obj["ETag"]

    def replace(self, body: bytes, token: Any) -> Any:
        return self._put(body, IfMatch=token)

    def take_over(self, body: bytes, token: Any) -> Any:
        return self._put(body, IfMatch=token)

    def delete(self, token: Any) -> None:
        cur = self.read()
        if cur is not None and cur[1] == token:
            self.client.delete_object(Bucket=self.bucket, Key=self.key)


def s3_client(uri: str) -> Any:
    """A boto3 client configured like the pyarrow filesystem of ``uri`` (``?endpoint_override=``,
    ``scheme``, ``region``; else the usual AWS environment, ``AWS_ENDPOINT_URL`` included)."""
    # deferred: boto3 is slow to import; only an s3:// lease needs it
    import boto3

    query = parse_qs(uri.partition("?")[2])
    kw: dict[str, Any] = {}
    if "endpoint_override" in query:
        ep = query["endpoint_override"][0]
        scheme = query.get("scheme", ["https"])[0]
        kw["endpoint_url"] = ep if "://" in ep else f"{scheme}://{ep}"
    if "region" in query:
        kw["region_name"] = query["region"][0]
    return boto3.client("s3", **kw)


def store_for(fs: Any, root: str, uri: str) -> Any | None:
    """The lease store for a sweep directory, or None where no conditional write exists."""
    if fs.type_name == "local":
        return LocalStore(f"{root}/{LEASE_FILE}")
    if fs.type_name == "s3":
        bucket, _, prefix = root.partition("/")
        return S3Store(bucket, f"{prefix}/{LEASE_FILE}".lstrip("/"), s3_client(uri))
    return None


# -- the lease -------------------------------------------------------------------------------


class Lease:
    """Held from :meth:`acquire` until :meth:`release`; a daemon thread beats every ``stale_s/4``."""

    def __init__(self, store: Any, stale_s: float, label: str) -> None:
        self.store, self.stale_s, self.label = store, float(stale_s), label
        self.owner = uuid.uuid4().hex
        self.acquired_at = _now().isoformat()
        self.token: Any = None
        self.lost: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def _body(self) -> bytes:
        return json.dumps({
            "owner": self.owner, "host": socket.gethostname(), "pid": os.getpid(),
            "acquired_at": self.acquired_at, "heartbeat_at": _now().isoformat(),
        }).encode()

    def try_acquire(self) -> dict[str, Any] | None:
        """Take the lease if free, stale or left by a dead local process; else the holder's info."""
        token = self.store.create(self._body())
        if token is not None:
            self.token = token
            return None
        cur = self.store.read()
        if cur is None:  # released between our create and read: try once more
            token = self.store.create(self._body())
            if token is not None:
                self.token = token
                return None
            cur = self.store.read()
            if cur is None:
                return {"owner": "?", "host": "?", "pid": "?", "heartbeat_at": "?"}
        info, tok = cur
        if _age_s(info) > self.stale_s or _pid_dead_here(info):
            token = self.store.take_over(self._body(), tok)
            if token is not None:
                self.token = token
                why = "dead process" if _pid_dead_here(info) else f"no heartbeat for {_age_s(info):.0f} s"
                print(f"[sweep] took over the lease of {self.label} from {describe(info)} ({why})", flush=True)
                return None
            cur = self.store.read()
            return cur[0] if cur else info
        return info

    def acquire(self, wait: bool, poll_s: float | None = None,
                sleep: Callable[[float], None] = time.sleep) -> Lease:
        """Take the lease or raise :class:`LeaseHeldError` (``wait``: poll until it is free or stale)."""
        said = False
        while True:
            holder = self.try_acquire()
            if holder is None:
                self._start()
                return self
            if not wait:
                raise LeaseHeldError(
                    f"{self.label} is being written by another driver: {describe(holder)}. "
                    f"Stop that driver or let it finish; sweep.wait_for_lease=true waits for it "
                    f"(a lease without a heartbeat for sweep.lease_stale_s={self.stale_s:g} s is taken over). "
                    f"Lease: {self.store.where}")
            if not said:
                print(f"[sweep] waiting for the lease of {self.label}, held by {describe(holder)}", flush=True)
                said = True
            sleep(poll_s if poll_s is not None else max(0.5, min(5.0, self.stale_s / 4)))

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._beat_loop, name="opteval-lease", daemon=True)
        self._thread.start()

    def _beat_loop(self) -> None:
        while not self._stop.wait(max(0.2, self.stale_s / 4)):
            try:
                self.beat()
            except Exception as exc:
                print(f"[sweep] lease heartbeat failed ({type(exc).__name__}: {exc}); retrying", flush=True)
            if self.lost:
                return

    def beat(self) -> None:
        with self._lock:
            if self.lost or self._stop.is_set():
                return
            token = self.store.replace(self._body(), self.token)
            if token is None:
                cur = self.store.read()
                self.lost = (f"the lease of {self.label} was taken by " + describe(cur[0])) if cur else \
                    f"the lease of {self.label} ({self.store.where}) was removed"
                print(f"[sweep] {self.lost}; this driver stops writing", flush=True)
            else:
                self.token = token

    def check(self) -> None:
        """Raise :class:`LeaseLostError` unless this driver still holds the lease (before writes)."""
        if self.lost:
            raise LeaseLostError(f"{self.lost}: this driver stopped writing; resume once the other finished")
        cur = self.store.read()
        if cur is None or cur[0].get("owner") != self.owner:
            self.lost = (f"the lease of {self.label} was taken by {describe(cur[0])}" if cur else
                         f"the lease of {self.label} ({self.store.where}) was removed")
            raise LeaseLostError(f"{self.lost}: this driver stopped writing; resume once the other finished")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        with self._lock:
            if self.lost or self.token is None:
                return
            try:
                self.store.delete(self.token)
            except Exception:
                pass
            self.token = None


def acquire(fs: Any, root: str, uri: str, label: str, stale_s: float, wait: bool) -> Lease | None:
    """The sweep's lease, or None (with a warning) on a store that has no conditional write."""
    store = store_for(fs, root, uri)
    if store is None:
        print(f"[sweep] warning: no writer lease on {fs.type_name} storage; run one driver per sweep.name",
              flush=True)
        return None
    return Lease(store, stale_s, label).acquire(wait)
