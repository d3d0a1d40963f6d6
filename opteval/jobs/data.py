"""Fetch, list and verify the benchmark files in the data directory.

    python jobs/data.py fetch [slug|primary|sirl|all ...] [--base-url URL] [--data-dir DIR]
    python jobs/data.py list   [--data-dir DIR]
    python jobs/data.py verify [slug ...] [--data-dir DIR]

``fetch`` downloads each benchmark from its pinned upstream (``REGISTRY[slug].upstream``:
repository, commit, path), converts it to the normalized JSONL, checks the pinned sha256
and writes ``<data_dir>/<relpath>`` atomically (temp file + rename, so a reader never sees
half a file). Nothing is written when the checksum differs.

Where it reads from (the *base*): ``--base-url``, else ``$OPTEVAL_DATA_BASE_URL``, else
``data.base_url`` in ``--config``, else ``https://raw.githubusercontent.com``. Two layouts
exist under a base:

* ``upstream``: ``<base>/<repo>/<commit>/<path>`` (GitHub raw); rows are converted.
* ``normalized``: ``<base>/<slug>.jsonl`` and ``<base>/variants/sirl/<name>.jsonl``,
  a mirror of already-normalized files (``file:///path/to/benchmarks``); bytes are
  copied after the checksum.

``--layout auto`` (the default) uses ``normalized`` for a ``file://`` base holding the
normalized file, ``upstream`` for the default GitHub base, and for any other base tries
``normalized`` first and falls back to ``upstream`` when it is not found.

The data directory: ``--data-dir``, else ``data.dir`` in ``--config``, else
``$OPTEVAL_DATA``, else ``~/.cache/opteval/data``.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from opteval.evalcore import problems as P
from opteval.exit_codes import ExitCode

DEFAULT_BASE_URL = "https://raw.githubusercontent.com"
BASE_URL_ENV = "OPTEVAL_DATA_BASE_URL"
LAYOUTS = ("auto", "upstream", "normalized")
GROUPS = {
    "primary": P.PRIMARY_SLUGS,
    "sirl": P.SIRL_SLUGS,
    "all": P.PRIMARY_SLUGS + P.SIRL_SLUGS,
}


class FetchError(RuntimeError):
    """A benchmark could not be fetched; the message names the slug and the URL."""


@dataclass(frozen=True)
class FetchResult:
    slug: str
    path: Path
    url: str | None
    action: str  # "written", "present" (already verified), "embedded" (sample)
    sha256: str | None


# -- locations --------------------------------------------------------------------------


def base_url(flag: str | None = None, cfg_value: str | None = None) -> str:
    """The base location: flag, then ``$OPTEVAL_DATA_BASE_URL``, then config, then GitHub raw."""
    for v in (flag, os.environ.get(BASE_URL_ENV), cfg_value):
        if v:
            return v if "://" in v else Path(v).resolve().as_uri()  # a bare path means file://
    return DEFAULT_BASE_URL


def _join(base: str, rel: str) -> str:
    return f"{base.rstrip('/')}/{rel}"


def _file_path(url: str) -> Path | None:
    parsed = urllib.parse.urlparse(url)
    return Path(urllib.request.url2pathname(parsed.path)) if parsed.scheme == "file" else None


def candidate_urls(entry: P.BenchmarkEntry, base: str, layout: str = "auto") -> list[tuple[str, str]]:
    """``(layout, url)`` pairs to try in order for one benchmark."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    normalized = ("normalized", _join(base, entry.relpath))
    upstream = ("upstream", entry.upstream.url(base)) if entry.upstream else None
    if layout == "normalized":
        return [normalized]
    if layout == "upstream":
        return [upstream] if upstream else []
    local = _file_path(base)
    if local is not None:
        if (local / entry.relpath).exists() or upstream is None:
            return [normalized]
        return [upstream]
    if base.rstrip("/") == DEFAULT_BASE_URL:
        return [upstream] if upstream else []
    return [normalized] + ([upstream] if upstream else [])


def _download(url: str, timeout: float = 60.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read()


def _not_found(exc: Exception) -> bool:
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code == 404
    return isinstance(exc, (FileNotFoundError, urllib.error.URLError)) and "No such file" in str(exc)


# -- fetch ----------------------------------------------------------------------------------


def normalized_bytes(entry: P.BenchmarkEntry, blob: bytes, layout: str, url: str) -> bytes:
    """What to write for a downloaded blob: as is for a normalized mirror, converted for
    an upstream file."""
    if layout == "normalized":
        return blob
    rows = P.read_upstream_rows(blob, url)
    return P.dump_jsonl(P.convert_upstream(rows, entry, where=url))


def write_atomic(path: Path, blob: bytes) -> None:
    """Write ``blob`` to ``path`` via a temp file in the same directory and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; the data directory is shared read-only data
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fetch_one(
    slug: str, base: str | None = None, data_dir: str | os.PathLike[str] | None = None,
    *, layout: str = "auto", force: bool = False,
) -> FetchResult:
    """Fetch one benchmark into the data directory (see the module docstring)."""
    entry = P.get_entry(slug)
    if entry.upstream is None and entry.slug == P.SAMPLE_SLUG:
        return FetchResult(slug, P.benchmark_path(slug), None, "embedded", None)
    dest = P.data_dir(data_dir) / entry.relpath
    if not force and dest.exists() and P.sha256_file(dest) == entry.sha256:
        return FetchResult(slug, dest, None, "present", entry.sha256)
    base = base or base_url()
    errors: list[str] = []
    for lay, url in candidate_urls(entry, base, layout):
        try:
            blob = _download(url)
        except (OSError, urllib.error.URLError) as e:
            errors.append(f"{url}: {e}")
            if _not_found(e):
                continue
            raise FetchError(f"{slug}: download failed: {url}: {e}") from e
        data = normalized_bytes(entry, blob, lay, url)
        got = P.sha256_bytes(data)
        if got != entry.sha256:
            raise FetchError(
                f"{slug}: sha256 of the normalized data from {url} is {got}, pinned {entry.sha256}; "
                f"nothing written to {dest}"
            )
        specs, _ = P.parse_rows(data.decode("utf-8"), url, slug)  # content check before writing
        if entry.count is not None and len(specs) != entry.count:
            raise FetchError(f"{slug}: {url} gave {len(specs)} problems, expected {entry.count}")
        write_atomic(dest, data)
        return FetchResult(slug, dest, url, "written", got)
    raise FetchError(f"{slug}: not found under {base} ({'; '.join(errors) or 'no source for this layout'})")


def expand_slugs(names: list[str]) -> list[str]:
    """Slugs and group names (primary, sirl, all) -> registered slugs, in order, once each."""
    out: list[str] = []
    for name in names or ["primary"]:
        for s in GROUPS.get(name, (name,)):
            P.get_entry(s)
            if s not in out:
                out.append(s)
    return out


@dataclass(frozen=True)
class FileStatus:
    slug: str
    count: int | None
    path: Path
    present: bool
    verified: bool


def file_status(slug: str, data_dir: str | os.PathLike[str] | None = None) -> FileStatus:
    """Whether a benchmark file is present and matches its pinned sha256 (cheap: no parse)."""
    entry = P.get_entry(slug)
    path = P.benchmark_path(slug, data_dir)
    present = path.exists()
    verified = present and (entry.sha256 is None or P.sha256_file(path) == entry.sha256)
    return FileStatus(slug, entry.count, path, present, verified)


# -- CLI ------------------------------------------------------------------------------------


def _config_values(path: str | None) -> tuple[str | None, str | None]:
    """``data.dir`` and ``data.base_url`` from a YAML config, if one is given."""
    if not path:
        return None, None
    # deferred: omegaconf loads only when --config names a YAML
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(path)
    return OmegaConf.select(cfg, "data.dir"), OmegaConf.select(cfg, "data.base_url")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", help="YAML config with data.dir / data.base_url")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("fetch", "list", "verify"):
        sp = sub.add_parser(name)
        sp.add_argument("--data-dir", help="data directory (default: $OPTEVAL_DATA or ~/.cache/opteval/data)")
        if name != "list":
            sp.add_argument("slugs", nargs="*", help="slugs or groups: primary (default), sirl, all")
        if name == "fetch":
            sp.add_argument("--base-url", help=f"base location (default: ${BASE_URL_ENV} or {DEFAULT_BASE_URL})")
            sp.add_argument("--layout", choices=LAYOUTS, default="auto")
            sp.add_argument("--force", action="store_true", help="re-download even if present and verified")
    args = ap.parse_args(argv)
    cfg_dir, cfg_base = _config_values(args.config)
    ddir = P.data_dir(args.data_dir or cfg_dir)
    try:
        if args.cmd == "list":
            return _cmd_list(ddir)
        slugs = expand_slugs(args.slugs)
        if args.cmd == "verify":
            return _cmd_verify(slugs, ddir)
        return _cmd_fetch(slugs, base_url(args.base_url, cfg_base), ddir, args.layout, args.force)
    except P.UnknownBenchmarkError as e:
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.USAGE


def _cmd_fetch(slugs: list[str], base: str, ddir: Path, layout: str, force: bool) -> int:
    failed = 0
    for slug in slugs:
        try:
            r = fetch_one(slug, base, ddir, layout=layout, force=force)
        except (FetchError, P.BenchmarkLoadError) as e:
            failed += 1
            print(f"FAILED  {e}", file=sys.stderr)
            continue
        print(f"{r.action:8s}{slug:22s}{r.path}" + (f"  <- {r.url}" if r.url else ""))
    if failed:
        print(f"{failed} benchmark(s) not fetched from {base}. Offline or behind a firewall: fetch from a local "
              "mirror with --base-url file:///path/to/mirror (normalized files or the upstream layout), or point "
              f"OPTEVAL_DATA at a directory that already holds the files (now: {ddir})", file=sys.stderr)
    return 1 if failed else 0


def _cmd_list(ddir: Path) -> int:
    print(f"data directory: {ddir}")
    print(f"{'slug':22s}{'count':>7s}  {'present':8s}{'verified':8s}")
    for slug in P.REGISTRY:
        st = file_status(slug, ddir)
        count = "-" if st.count is None else str(st.count)
        print(f"{slug:22s}{count:>7s}  {'yes' if st.present else 'no':8s}{'yes' if st.verified else 'no':8s}")
    return 0


def _cmd_verify(slugs: list[str], ddir: Path) -> int:
    failed = 0
    for slug in slugs:
        try:
            specs, _ = P.load_benchmark(slug, ddir)
        except P.BenchmarkLoadError as e:
            failed += 1
            print(f"FAILED  {e}", file=sys.stderr)
            continue
        print(f"ok      {slug:22s}{len(specs):6d} problems")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
