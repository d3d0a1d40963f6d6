"""Problems as a model may see them, kept apart from the answers only the grader sees.

Loading a benchmark yields two objects: a list of :class:`ProblemSpec` (benchmark, id,
question; everything a prompt may be built from) and an :class:`AnswerKey` (id -> answer),
which stays with the driver and the grader. Nothing that builds a prompt needs the key.

Benchmarks live as *normalized JSONL* in a data directory: one object per line with the
keys ``id``, ``question``, ``answer``, ``source``. Primary benchmarks are
``<data_dir>/<slug>.jsonl``; the SIRL-corrected variants (slug ``<name>@sirl``) are
``<data_dir>/variants/sirl/<name>.jsonl``, the layout ``jobs/data.py fetch`` writes and a
mirror of normalized files keeps, so such a mirror works as a data directory as it is. The embedded ``sample`` benchmark is
read from :mod:`opteval.evalcore.data`.

Every registered file is pinned by count and by the sha256 of its normalized bytes, so a
silently changed benchmark cannot change a paper's numbers. ``jobs/data.py fetch`` builds
these files from the pinned public upstreams (see :func:`convert_upstream`).
"""
from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Answer = float | str  # a finite number, "infeasible" or "unbounded"

ANSWER_STATUSES = ("infeasible", "unbounded")
REQUIRED_FIELDS = ("id", "question", "answer")
DATA_ENV = "OPTEVAL_DATA"
DEFAULT_DATA_DIR = Path("~/.cache/opteval/data")


@dataclass(frozen=True)
class ProblemSpec:
    """Everything a prompt may be built from. Holds no answer, by construction."""

    benchmark: str
    id: str
    question: str


@dataclass(frozen=True)
class AnswerKey:
    """id -> expected answer for one benchmark; lives with the driver and the grader only."""

    benchmark: str
    answers: dict[str, Answer]

    def __getitem__(self, problem_id: str) -> Answer:
        return self.answers[problem_id]

    def __contains__(self, problem_id: object) -> bool:
        return problem_id in self.answers

    def __len__(self) -> int:
        return len(self.answers)


class BenchmarkLoadError(ValueError):
    """A benchmark file is absent, malformed or not the pinned one. The message names the
    file (and the line, for content errors) so the fix is obvious."""


class UnknownBenchmarkError(KeyError):
    """A slug that is not in :data:`REGISTRY`; the message lists the known slugs."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


# -- registry -------------------------------------------------------------------------


@dataclass(frozen=True)
class Upstream:
    """A pinned public source file: repository, commit, path and its row format.

    ``fmt`` is ``"llmopt"`` (LLMOPT unified test sets: ``question``/``answer``/``index``)
    or ``"sirl"`` (SIRL ``test_data``: ``en_question``/``en_answer``, sentinels for
    infeasible). The converter accepts either key spelling; ``fmt`` decides the sentinels.
    """

    repo: str
    commit: str
    path: str
    fmt: str = "llmopt"

    @property
    def source(self) -> str:
        """The ``source`` field written into every normalized row: ``owner/repo@commit:path``."""
        return f"{self.repo}@{self.commit}:{self.path}"

    def url(self, base_url: str = "https://raw.githubusercontent.com") -> str:
        """Raw-file URL under a GitHub-raw-like base: ``<base>/<repo>/<commit>/<path>``."""
        return f"{base_url.rstrip('/')}/{self.repo}/{self.commit}/{self.path}"


@dataclass(frozen=True)
class BenchmarkEntry:
    """One registered benchmark file.

    ``relpath`` is where the normalized file sits under a data directory; ``id_prefix``
    is what every id starts with (``nl4opt`` gives ``nl4opt-0001``, ``nl4opt@sirl`` gives
    ``nl4opt-sirl-0001``). ``count``/``sha256`` are None only for ``sample``, which ships
    inside the package and is pinned by the package itself.
    """

    slug: str
    relpath: str
    id_prefix: str
    count: int | None
    sha256: str | None
    upstream: Upstream | None
    primary: bool = False  # one of the nine of the 2,634-problem set
    variant: str | None = None  # "sirl" for corrected variants
    note: str = ""
    path: str | None = None  # a local benchmark's own file (register_local_benchmark), else None


LLMOPT_REPO = "antgroup/LLMOPT"
LLMOPT_COMMIT = "1492dd33e39ea13f1afe32a0adc13d4217334195"
SIRL_REPO = "Cardinal-Operations/SIRL"
SIRL_COMMIT = "8e85194b8f251ec229cc310c2c6e8794ead85682"

# slug, upstream file under data/testset/, count, sha256 of our normalized JSONL
_PRIMARY = [
    ("nl4opt", "nl4opt_test.jsonl", 230, "37385e37d7efef6076565b03a6a55ea1a93d4395fc065071b4f1a9e5e92ee71d"),
    ("mamo_easy", "mamo_easy_test.jsonl", 652, "f6a4a2d469695a95fefa59c26d38ebcbae246ad573386ca124a0819fed854884"),
    ("mamo_complex", "mamo_complex_test.jsonl", 211, "470befa6af1bbd8f1ec75a32507659af27ba2a2b9975de97b001761da9a9f0af"),
    ("nlp4lp", "nlp4lp.jsonl", 242, "6d38d45ff0efaa6074949542fa676167dcb285bdeb919caa969e6863ed7c7300"),
    ("complexor", "complexor.jsonl", 18, "b02a25fec5e9173e0b69be51f4b69ee1c625ddf215fe3fa013eb47ae8a1fe77f"),
    ("industryor", "industryor.jsonl", 100, "de84b4d9d7f21cb9647e25373079388094c05642d48c710b132e05606fa66090"),
    ("optibench", "optibench.jsonl", 605, "b38604a4d291f3bbe1d54efd19ff9d84b4d448c0fd64efafe74eee7f6f1289bb"),
    ("optmath", "optmath_bench.jsonl", 166, "8b805677b5e9c340862f75e419f4fda9fc03111b1a2c2f471c2213fefb5ee9c0"),
    ("icml_competition", "task3_test.jsonl", 410, "62afd1c24e775d0863bee2a622cc2a36937fd94b6edd7322207cf9baa35cfe9d"),
]

# name, upstream file under test_data/, count, sha256 of our normalized JSONL
_SIRL = [
    ("nl4opt", "NL4OPT.jsonl", 245, "31ff85afe1044e91ff76ac311b33a3a459184e4bbcfd3822e3600c6ecf4cb344"),
    ("mamo_easy", "MAMO_EasyLP_fixed.jsonl", 642, "11c9aa9f8ee270eb505523b42984630e25b6d596e19b84f8bef354c7a3651a9e"),
    ("mamo_complex", "MAMO_ComplexLP_fixed.jsonl", 203, "f1dc6cc2f8fb94e11f3f49f8fb3a31bd3908bdc0a26f891a9a1313dc88b7db81"),
    ("industryor", "IndustryOR_fixedV2.json", 100, "cc2c5b7e654a36ea7501fbe467c0038527a628347847eedbba0a4fe56d41fd33"),
    ("optmath", "OptMATH_Bench_166.jsonl", 166, "212bf04ee24445e226dd7d20bea647e70106587b5c46b25cba6c5c40a9154068"),
    ("optmath_193", "OptMATH_Bench_193.jsonl", 193, "8d63a2ea58a5a2b606b63171eeb4b7dedb778f8e77a2dab45e36942c93c84721"),
    ("optibench", "OptiBench.jsonl", 605, "52e934ad7073bab3120b55b060ad1999dada3638097d2dedcc48ad50f00fe6da"),
]

SAMPLE_SLUG = "sample"


def _build_registry() -> dict[str, BenchmarkEntry]:
    reg: dict[str, BenchmarkEntry] = {}
    for slug, fname, count, sha in _PRIMARY:
        reg[slug] = BenchmarkEntry(
            slug=slug, relpath=f"{slug}.jsonl", id_prefix=slug, count=count, sha256=sha,
            upstream=Upstream(LLMOPT_REPO, LLMOPT_COMMIT, f"data/testset/{fname}", "llmopt"),
            primary=True,
        )
    for name, fname, count, sha in _SIRL:
        slug = f"{name}@sirl"
        reg[slug] = BenchmarkEntry(
            slug=slug, relpath=f"variants/sirl/{name}.jsonl", id_prefix=f"{name}-sirl",
            count=count, sha256=sha,
            upstream=Upstream(SIRL_REPO, SIRL_COMMIT, f"test_data/{fname}", "sirl"),
            variant="sirl",
        )
    reg[SAMPLE_SLUG] = BenchmarkEntry(
        slug=SAMPLE_SLUG, relpath="sample.jsonl", id_prefix=SAMPLE_SLUG, count=None, sha256=None,
        upstream=None, note="embedded in opteval.evalcore.data; original problems written for this project",
    )
    return reg


REGISTRY: dict[str, BenchmarkEntry] = _build_registry()
PRIMARY_SLUGS: tuple[str, ...] = tuple(s for s, *_ in _PRIMARY)
SIRL_SLUGS: tuple[str, ...] = tuple(f"{n}@sirl" for n, *_ in _SIRL)
PRIMARY_TOTAL = sum(c for _, _, c, _ in _PRIMARY)  # 2,634


def register_local_benchmark(slug: str, path: str | os.PathLike[str], sha256: str | None = None) -> BenchmarkEntry:
    """Add a benchmark that is one local JSONL file (rows ``id``, ``question``, ``answer``): the
    one way in for a benchmark defined by configuration alone (``configs/benchmarks/<slug>.yaml``
    with ``path:``). ``sha256``, when given, is checked on every load. A pinned public slug
    cannot be redefined; registering a local slug again replaces it."""
    old = REGISTRY.get(slug)
    if old is not None and old.path is None:
        raise ValueError(f"benchmark {slug!r} is a pinned benchmark of opteval.evalcore.problems.REGISTRY; "
                         f"a local benchmark needs another name")
    entry = BenchmarkEntry(slug=slug, relpath="", id_prefix="", count=None, sha256=sha256, upstream=None,
                           note="local file", path=str(Path(path)))
    REGISTRY[slug] = entry
    return entry


def get_entry(slug: str) -> BenchmarkEntry:
    """The registry entry for ``slug``; an unknown slug names the known ones."""
    try:
        return REGISTRY[slug]
    except KeyError:
        close = difflib.get_close_matches(slug, list(REGISTRY), n=1)
        raise UnknownBenchmarkError(
            f"unknown benchmark {slug!r}; known: {', '.join(sorted(REGISTRY))}"
            + (f"; did you mean {close[0]!r}?" if close else "")
        ) from None


# -- data directory -----------------------------------------------------------------


def data_dir(cfg_value: str | os.PathLike[str] | None = None) -> Path:
    """Where normalized benchmark files live: the config value if given, else
    ``$OPTEVAL_DATA``, else ``~/.cache/opteval/data``. Not created here (loading must not
    leave empty directories behind); ``jobs/data.py fetch`` creates it."""
    if cfg_value not in (None, ""):
        return Path(cfg_value).expanduser()
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env).expanduser()
    return DEFAULT_DATA_DIR.expanduser()


_resolve_data_dir = data_dir  # load_benchmark's parameter shadows the function name


def benchmark_path(slug: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The normalized file of ``slug`` (the packaged file for ``sample``)."""
    entry = get_entry(slug)
    if entry.slug == SAMPLE_SLUG:
        return _sample_path()
    if entry.path is not None:
        return Path(entry.path)
    return _resolve_data_dir(data_dir) / entry.relpath


def _sample_path() -> Path:
    from opteval.evalcore import data as sample_data  # lazy: written separately, optional at import

    return Path(sample_data.SAMPLE_JSONL)


# -- parsing ------------------------------------------------------------------------


def sha256_bytes(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def normalize_answer(value: Any) -> Answer | None:
    """A stored answer as the grader wants it: a finite float, ``"infeasible"`` or
    ``"unbounded"``; None when it is none of these. Booleans are not numbers here."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, str) and value.strip().lower() in ANSWER_STATUSES:
        return value.strip().lower()
    return None


def parse_rows(text: str, path: str | os.PathLike[str], benchmark: str) -> tuple[list[ProblemSpec], AnswerKey]:
    """Parse normalized JSONL text. Every content error names ``path`` and the 1-based
    line; a duplicate id names both lines. Blank lines are skipped (not counted as rows)."""
    specs: list[ProblemSpec] = []
    answers: dict[str, Answer] = {}
    first_line: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise BenchmarkLoadError(f"{where}: invalid JSON ({e.msg} at column {e.colno})") from e
        if not isinstance(row, dict):
            raise BenchmarkLoadError(f"{where}: expected a JSON object, got {type(row).__name__}")
        missing = [k for k in REQUIRED_FIELDS if k not in row]
        if missing:
            raise BenchmarkLoadError(f"{where}: missing field(s) {', '.join(missing)}")
        pid, question = row["id"], row["question"]
        if not isinstance(pid, str) or not pid:
            raise BenchmarkLoadError(f"{where}: field 'id' must be a non-empty string, got {pid!r}")
        if not isinstance(question, str) or not question.strip():
            raise BenchmarkLoadError(f"{where}: field 'question' of {pid!r} must be a non-empty string")
        answer = normalize_answer(row["answer"])
        if answer is None:
            raise BenchmarkLoadError(
                f"{where}: answer of {pid!r} is {row['answer']!r}; expected a finite number, "
                f"'infeasible' or 'unbounded'"
            )
        if pid in first_line:
            raise BenchmarkLoadError(
                f"{path}: duplicate id {pid!r} on lines {first_line[pid]} and {lineno}"
            )
        first_line[pid] = lineno
        specs.append(ProblemSpec(benchmark=benchmark, id=pid, question=question))
        answers[pid] = answer
    return specs, AnswerKey(benchmark=benchmark, answers=answers)


def load_jsonl(
    path: str | os.PathLike[str], benchmark: str, *, count: int | None = None, sha256: str | None = None,
    local: bool = False,
) -> tuple[list[ProblemSpec], AnswerKey]:
    """Load any normalized JSONL file, checking ``count`` and ``sha256`` when given.

    Content is checked first (errors with a line number are more useful than a checksum),
    then the count, then the checksum.
    """
    p = Path(path)
    try:
        blob = p.read_bytes()
    except FileNotFoundError:
        raise BenchmarkLoadError(f"{p}: benchmark file {benchmark!r} not found") from None
    except OSError as e:
        raise BenchmarkLoadError(f"{p}: cannot read benchmark file ({e})") from e
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as e:
        line = blob[: e.start].count(b"\n") + 1
        raise BenchmarkLoadError(f"{p}:{line}: not valid UTF-8") from e
    specs, key = parse_rows(text, p, benchmark)
    if count is not None and len(specs) != count:
        raise BenchmarkLoadError(f"{p}: {benchmark!r} has {len(specs)} problems, expected {count}")
    if sha256 is not None:
        got = sha256_bytes(blob)
        if got != sha256 and local:
            raise BenchmarkLoadError(f"{p}: sha256 mismatch for local benchmark {benchmark!r}: got {got}, "
                                     f"its YAML pins {sha256}")
        if got != sha256:
            raise BenchmarkLoadError(
                f"{p}: sha256 mismatch for {benchmark!r}: got {got}, pinned {sha256} "
                f"(re-fetch with `opteval data fetch {benchmark}`, or pass verify=False)"
            )
    return specs, key


def load_benchmark(
    slug: str, data_dir: str | os.PathLike[str] | None = None, *, verify: bool = True
) -> tuple[list[ProblemSpec], AnswerKey]:
    """Load a registered benchmark: its problems (what a model may see) and its answer key.

    ``data_dir`` follows :func:`data_dir` resolution. With ``verify`` (the default) the
    problem count and the sha256 of the file must match the registry; ``verify=False``
    skips the checksum only (a wrong count or malformed content is always an error).
    """
    entry = get_entry(slug)
    path = benchmark_path(slug, data_dir)
    if entry.path is not None:
        if not path.is_file():
            raise BenchmarkLoadError(f"{path}: the file of local benchmark {slug!r} does not exist")
        return load_jsonl(path, slug, sha256=entry.sha256 if verify else None, local=True)
    if entry.count is None and not path.exists():
        raise BenchmarkLoadError(f"{path}: embedded benchmark {slug!r} is missing from the package")
    if not path.exists():
        raise BenchmarkLoadError(
            f"{path}: benchmark {slug!r} not found in data directory {_resolve_data_dir(data_dir)} "
            f"(fetch it with `opteval data fetch {slug}`, or set ${DATA_ENV})"
        )
    return load_jsonl(path, slug, count=entry.count, sha256=entry.sha256 if verify else None)


def load_problem_ids(
    slug: str, data_dir: str | os.PathLike[str] | None = None, *, verify: bool = True
) -> list[str]:
    """The problem ids of a benchmark in file order, for planning (the answers are dropped)."""
    specs, _ = load_benchmark(slug, data_dir, verify=verify)
    return [s.id for s in specs]


def load_many(
    slugs: Iterable[str], data_dir: str | os.PathLike[str] | None = None, *, verify: bool = True
) -> dict[str, tuple[list[ProblemSpec], AnswerKey]]:
    """:func:`load_benchmark` for several slugs, keyed by slug."""
    return {s: load_benchmark(s, data_dir, verify=verify) for s in slugs}


# -- conversion from the pinned upstream formats ------------------------------------------

_QUESTION_KEYS = ("question", "en_question", "Question", "problem", "description")
_ANSWER_KEYS = ("answer", "en_answer", "Answer", "ground_truth", "optimal_value")
# SIRL README: "No Best Solution" and the sentinels -9999 / -99999 mean infeasible.
_SIRL_INFEASIBLE_WORDS = {"no best solution", "infeasible", "no feasible solution"}
_SIRL_INFEASIBLE_SENTINELS = {-9999.0, -99999.0}
_INT_RE = re.compile(r"^[+-]?\d+$")


def read_upstream_rows(blob: bytes, where: str) -> list[dict[str, Any]]:
    """Rows of an upstream file: JSON Lines, or one JSON array / object of rows
    (SIRL's ``IndustryOR_fixedV2.json``)."""
    text = blob.decode("utf-8-sig")
    stripped = text.lstrip()
    if stripped.startswith("["):
        data = json.loads(text)
        return list(data)
    if stripped.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None  # JSON Lines
        if isinstance(data, dict):
            vals = list(data.values())
            if vals and all(isinstance(v, dict) for v in vals):
                return vals
            return [data]
    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise BenchmarkLoadError(f"{where}:{lineno}: invalid JSON in upstream file ({e.msg})") from e
    return rows


def _upstream_answer(raw: Any, fmt: str, where: str) -> float | int | str:
    if isinstance(raw, str):
        s = raw.strip()
        if fmt == "sirl" and s.lower() in _SIRL_INFEASIBLE_WORDS:
            return "infeasible"
        if s.lower() in ANSWER_STATUSES:
            return s.lower()
        try:
            value: float | int = int(s) if _INT_RE.match(s) else float(s.replace(",", ""))
        except ValueError:
            raise BenchmarkLoadError(f"{where}: upstream answer {raw!r} is not a number or status") from None
    elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
        value = raw
    else:
        raise BenchmarkLoadError(f"{where}: upstream answer {raw!r} is not a number or status")
    if fmt == "sirl" and float(value) in _SIRL_INFEASIBLE_SENTINELS:
        return "infeasible"
    if not math.isfinite(float(value)):
        raise BenchmarkLoadError(f"{where}: upstream answer {raw!r} is not finite")
    return value


def _first_key(row: dict[str, Any], keys: tuple[str, ...], where: str, what: str) -> Any:
    for k in keys:
        if k in row:
            return row[k]
    raise BenchmarkLoadError(f"{where}: upstream row has no {what} field (tried {', '.join(keys)})")


def convert_upstream(rows: list[dict[str, Any]], entry: BenchmarkEntry, where: str = "") -> list[dict[str, Any]]:
    """Upstream rows -> normalized rows (``id``, ``question``, ``answer``, ``source``).

    Ids are ``<id_prefix>-NNNN`` with the upstream 1-based ``index`` when the row has one,
    else its 1-based position. Question text is copied verbatim. Numeric-string answers
    become numbers (``"700.0"`` -> 700.0, ``"12"`` -> 12); SIRL infeasible markers become
    ``"infeasible"``. Order is kept.
    """
    if entry.upstream is None:
        raise BenchmarkLoadError(f"{entry.slug!r} has no upstream to convert from")
    fmt, source = entry.upstream.fmt, entry.upstream.source
    out = []
    for pos, row in enumerate(rows, start=1):
        at = f"{where or entry.upstream.path} row {pos}"
        if not isinstance(row, dict):
            raise BenchmarkLoadError(f"{at}: expected an object, got {type(row).__name__}")
        question = _first_key(row, _QUESTION_KEYS, at, "question")
        answer = _upstream_answer(_first_key(row, _ANSWER_KEYS, at, "answer"), fmt, at)
        index = row.get("index", pos)
        if isinstance(index, str) and _INT_RE.match(index.strip()):
            index = int(index)
        if not isinstance(index, int) or isinstance(index, bool):
            raise BenchmarkLoadError(f"{at}: upstream index {index!r} is not an integer")
        out.append({"id": f"{entry.id_prefix}-{index:04d}", "question": question, "answer": answer, "source": source})
    return out


def dump_jsonl(rows: Iterable[dict[str, Any]]) -> bytes:
    """The canonical normalized serialization (the pinned sha256s are over these bytes)."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
