"""Audit a benchmark's answer keys from the evidence opteval holds (issue 37; docs/audit.md).

Three kinds of evidence, each on its own:

* ``variants``: the pinned variants of a benchmark (the original and SIRL's re-keyed ``@sirl``)
  disagree on the key of the same problem. Problems are matched by content (:func:`match_variants`:
  the numbers in the question and text similarity), never by id or position.
* ``consensus``: trajectories whose answer came from their own solve (``answer_source = solve``)
  agree on a value the key rejects, from enough independent formulations, while few or none reach
  the key (:class:`AuditSettings`).
* ``reference``: trajectories whose formulation is the reference program's (``reference_match =
  same``) solved it to a value the key rejects, and none of them reached the key.

Every problem gets a verdict: ``suspect`` (some evidence fired), ``ok`` (none fired and the key is
reached by solves, or a matched variant has the same data and key) or ``unknown`` (nothing
conclusive either way). Pure logic: no Ray, no I/O beyond what the caller hands in.
"""
from __future__ import annotations

import difflib
import heapq
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from opteval.evalcore.grading import Parsed, grade_parsed, parse_submission

EVIDENCE_KINDS = ("variants", "consensus", "reference")
VERDICTS = ("ok", "suspect", "unknown")
# The pinned columns (other tools read them); the rest follow.
PINNED_COLUMNS = ("benchmark", "problem_id", "key", "verdict", "alternative", "evidence", "support", "why")
COLUMNS = PINNED_COLUMNS + (
    "support_trajectories", "support_models", "support_formulations", "key_trajectories", "solved_trajectories",
    "trajectories", "variant", "variant_key", "variant_match", "duplicate_of")
# What the audit reads of a ledger: never the transcript, calls or execs.
LEDGER_COLUMNS = ["model", "benchmark", "problem_id", "status", "submission_value", "submission_status",
                  "grading_profile", "answer_source", "model_fingerprint", "reference_match"]
DEFAULT_PROFILE = "optagentbench"


@dataclass(frozen=True)
class AuditSettings:
    """The thresholds of ``consensus`` (docs/audit.md: what each default trades).

    independence: what counts as one independent backer of a value: ``formulations`` (distinct
      formulation fingerprints; rows without one, from ledgers older than issue 36, count their
      model instead), ``models`` or ``either`` (the larger of the two counts). Default
      ``formulations``: two models that share code (simulated clones, fine-tunes of one base) write
      the same wrong program, and counting them twice raised false alarms.
    min_independent: independent backers the alternative needs (default 2: one formulation alone is
      one mistake repeated).
    min_trajectories: solve-sourced trajectories the alternative needs (default 3).
    min_share: the alternative's share of the solve-sourced answers (default 0.4, and it must be the
      largest group, strictly: a plurality of the solves; higher misses wrong keys of hard problems,
      where wrong programs scatter over many values and the right one is the largest group short of
      half; lower raises false alarms where one shared wrong program is as common as the right one).
    max_key_share: the key's share of the solve-sourced answers above which the key counts as
      reached (default 0.1: "few or none"; higher flags keys some solves reach, lower is stricter).
    """

    independence: str = "either"
    min_independent: int = 2
    min_trajectories: int = 3
    min_share: float = 0.4
    max_key_share: float = 0.1

    def __post_init__(self) -> None:
        if self.independence not in ("formulations", "models", "either"):
            raise ValueError(f"independence must be formulations, models or either, got {self.independence!r}")
        if self.min_independent < 1 or self.min_trajectories < 1:
            raise ValueError("min_independent and min_trajectories must be at least 1")
        if not (0.0 <= self.min_share <= 1.0 and 0.0 <= self.max_key_share <= 1.0):
            raise ValueError("min_share and max_key_share are shares in [0, 1]")


# -- one problem's answers ------------------------------------------------------------------------


@dataclass
class _Value:
    value: Parsed
    n: int = 0
    models: set[str] = field(default_factory=set)
    fingerprints: set[str] = field(default_factory=set)
    unprinted_models: set[str] = field(default_factory=set)  # models of rows without a fingerprint
    reference_same: int = 0


@dataclass
class ProblemEvidence:
    """What the ledgers say about one problem: its solve-sourced answers by value."""

    trajectories: int = 0
    profile: str | None = None
    values: dict[str, _Value] = field(default_factory=dict)

    @property
    def solved(self) -> int:
        return sum(v.n for v in self.values.values())


def value_token(value: Parsed) -> str:
    """A value's bucket before tolerance merging: a status word, or 9 significant digits."""
    if isinstance(value, str) or value is None:
        return str(value)
    return f"{float(value):.9g}"


class Collector:
    """Aggregates ledger rows (record batches of :data:`LEDGER_COLUMNS`) problem by problem, so
    the audit's memory follows the number of distinct (problem, value) pairs, not the rows."""

    def __init__(self) -> None:
        self.problems: dict[tuple[str, str], ProblemEvidence] = defaultdict(ProblemEvidence)
        self.rows = 0

    def add_batch(self, batch: Any) -> None:
        cols = {name: batch.column(name).to_pylist() for name in LEDGER_COLUMNS if name in batch.schema.names}
        n = batch.num_rows
        none = [None] * n
        get = lambda name: cols.get(name, none)  # noqa: E731 - a ledger older than issue 36 lacks some
        self.add_rows(zip(get("model"), get("benchmark"), get("problem_id"), get("status"), get("submission_value"),
                          get("submission_status"), get("grading_profile"), get("answer_source"),
                          get("model_fingerprint"), get("reference_match"), strict=True))

    def add_rows(self, rows: Iterable[tuple[Any, ...]]) -> None:
        problems = self.problems
        for model, bench, pid, status, value, word, profile, source, fp, ref in rows:
            self.rows += 1
            ev = problems[(bench, pid)]
            ev.trajectories += 1
            if ev.profile is None and profile:
                ev.profile = profile
            if status == "error":
                continue
            # A ledger older than issue 36 has no answer_source: its answers count as solves.
            if source is not None and source != "solve":
                continue
            parsed: Parsed = word if word else (value if value is not None and math.isfinite(value) else None)
            if parsed is None:
                continue
            tok = value_token(parsed)
            v = ev.values.get(tok)
            if v is None:
                v = ev.values[tok] = _Value(parsed)
            v.n += 1
            v.models.add(model)
            if fp:
                v.fingerprints.add(fp)
            else:
                v.unprinted_models.add(model)
            if ref == "same":
                v.reference_same += 1


@dataclass
class Cluster:
    """Solve-sourced answers that grade equal to one another (under the problem's profile)."""

    value: Parsed
    n: int
    models: set[str]
    fingerprints: set[str]
    unprinted_models: set[str]
    reference_same: int

    def independent(self, how: str) -> int:
        formulations = len(self.fingerprints) + len(self.unprinted_models)
        if how == "formulations":
            return formulations
        if how == "models":
            return len(self.models)
        return max(formulations, len(self.models))

    def support(self) -> str:
        return (f"{self.n} trajectories, {len(self.models)} models, "
                f"{len(self.fingerprints)} formulations" + (f" (+{len(self.unprinted_models)} models' rows "
                                                           "without a fingerprint)" if self.unprinted_models else ""))


def clusters(ev: ProblemEvidence, profile: str) -> list[Cluster]:
    """Merge the problem's value buckets that grade equal to the largest bucket first (largest first)."""
    out: list[Cluster] = []
    for v in sorted(ev.values.values(), key=lambda v: (-v.n, value_token(v.value))):
        for c in out:
            if grade_parsed(v.value, c.value, profile):
                c.n += v.n
                c.models |= v.models
                c.fingerprints |= v.fingerprints
                c.unprinted_models |= v.unprinted_models
                c.reference_same += v.reference_same
                break
        else:
            out.append(Cluster(v.value, v.n, set(v.models), set(v.fingerprints), set(v.unprinted_models),
                               v.reference_same))
    out.sort(key=lambda c: -c.n)
    return out


# -- variants: the same problem in the original and a re-keyed variant ------------------------------

_NUM = re.compile(r"(?<![A-Za-z_])-?\d+(?:,\d{3})*(?:\.\d+)?")
_WORD = re.compile(r"[a-z]+")


def numbers(text: str) -> list[str]:
    """The question's numbers as written (thousands separators dropped), in order."""
    out = []
    for m in _NUM.finditer(text):
        s = m.group(0).replace(",", "")
        try:
            out.append(f"{float(s):.9g}")
        except ValueError:
            continue
    return out


def _multiset_jaccard(a: list[str] | Counter[str], b: list[str] | Counter[str]) -> float:
    ca = a if isinstance(a, Counter) else Counter(a)
    cb = b if isinstance(b, Counter) else Counter(b)
    na, nb = ca.total(), cb.total()
    if not na and not nb:
        return 1.0
    inter = (ca & cb).total()
    return inter / (na + nb - inter)


@dataclass(frozen=True)
class MatchSettings:
    """How problems are matched across variants (docs/audit.md).

    min_text: text similarity (difflib ratio of the lower-cased words) a match needs, unless the
      numbers agree at ``min_numbers_alone``; margin: the best candidate must beat the second by this
      much in combined score, else the match is refused as ambiguous; same_data: number-multiset
      agreement at which two matched questions hold the same data (below it they are ``changed``);
      duplicate_numbers / duplicate_text: two questions of one benchmark are the same problem (IndustryOR's
      0062 and 0063 agree 0.81 on numbers and 0.76 on text, keyed 11250 and 1250).
    """

    min_text: float = 0.55
    min_numbers_alone: float = 0.9
    min_numbers: float = 0.3
    margin: float = 0.05
    candidates: int = 3
    same_data: float = 1.0
    duplicate_numbers: float = 0.8
    duplicate_text: float = 0.75


@dataclass
class _Doc:
    id: str
    text: str
    words: list[str]
    wordset: frozenset[str]
    nums: list[str]
    numc: Counter[str]


def _doc(pid: str, question: str) -> _Doc:
    words = _WORD.findall(question.lower())
    nums = numbers(question)
    return _Doc(pid, question, words, frozenset(words), nums, Counter(nums))


def _score(a: _Doc, b: _Doc) -> tuple[float, float, float]:
    if a.words == b.words:
        text = 1.0
    else:
        text = difflib.SequenceMatcher(None, a.words, b.words, autojunk=False).ratio()
    nums = _multiset_jaccard(a.numc, b.numc)
    return (text + nums) / 2, text, nums


@dataclass
class VariantPair:
    original: str
    variant: str | None
    status: str  # matched (same data) | changed (similar text, other data) | ambiguous | none
    text: float = 0.0
    nums: float = 0.0
    note: str = ""


@dataclass
class VariantReport:
    benchmark: str
    variant: str
    pairs: list[VariantPair]
    duplicates: list[tuple[str, str, str]]  # (benchmark, id a, id b) with different keys

    def counts(self) -> dict[str, int]:
        c = {"matched": 0, "changed": 0, "ambiguous": 0, "no_counterpart": 0}
        for p in self.pairs:
            c["no_counterpart" if p.status == "none" else p.status] += 1
        return c


def match_variants(original: Mapping[str, str], variant: Mapping[str, str],
                   settings: MatchSettings | None = None) -> list[VariantPair]:
    """Match each original question (id -> text) to at most one variant question by content.

    Candidates are the variant questions sharing the most words; each is scored by difflib's ratio
    on the words and the Jaccard agreement of the numbers. The best is a match when its text is
    similar enough (or its numbers agree nearly all), beats the second by ``margin`` and is not the
    best of a better-scoring original; otherwise ``ambiguous`` or ``none``."""
    s = settings or MatchSettings()
    odocs = [_doc(k, v) for k, v in original.items()]
    vdocs = [_doc(k, v) for k, v in variant.items()]
    proposals: list[tuple[float, int, VariantPair]] = []
    exact: dict[tuple[str, ...], list[_Doc]] = defaultdict(list)
    for d in vdocs:
        exact[tuple(d.words) + tuple(d.nums)].append(d)
    for i, o in enumerate(odocs):
        same = exact.get(tuple(o.words) + tuple(o.nums), [])
        if len(same) == 1:  # the same words and numbers: no need to score every candidate
            proposals.append((2.0, i, VariantPair(o.id, same[0].id, "matched", 1.0, 1.0)))
            continue
        cheap = heapq.nlargest(s.candidates, vdocs, key=lambda d: len(o.wordset & d.wordset)
                               / max(1, len(o.wordset | d.wordset)) + _multiset_jaccard(o.numc, d.numc))
        scored = sorted(((_score(o, d), d) for d in cheap), key=lambda t: -t[0][0])
        ok = [(sc, d) for sc, d in scored
              if (sc[1] >= s.min_text and sc[2] >= s.min_numbers) or sc[2] >= s.min_numbers_alone and sc[1] >= 0.3]
        if not ok:
            best = scored[0] if scored else None
            note = f"best text {best[0][1]:.2f}, numbers {best[0][2]:.2f}" if best else "no candidate"
            proposals.append((0.0, i, VariantPair(o.id, None, "none", note=note)))
            continue
        (sc, d) = ok[0]
        if len(ok) > 1 and ok[1][0][0] > sc[0] - s.margin and ok[1][1].words != d.words:
            proposals.append((0.0, i, VariantPair(o.id, None, "ambiguous", sc[1], sc[2],
                                                  note=f"{d.id} and {ok[1][1].id} score within {s.margin}")))
            continue
        status = "matched" if sc[2] >= s.same_data else "changed"
        proposals.append((sc[0], i, VariantPair(o.id, d.id, status, sc[1], sc[2])))
    taken: dict[str, str] = {}
    out: list[VariantPair | None] = [None] * len(odocs)
    for _rank, i, pair in sorted(proposals, key=lambda t: -t[0]):
        if pair.variant is not None and pair.variant in taken:
            pair = VariantPair(pair.original, None, "ambiguous", pair.text, pair.nums,
                               note=f"its best match {pair.variant} is {taken[pair.variant]}'s better match")
        elif pair.variant is not None:
            taken[pair.variant] = pair.original
        out[i] = pair
    return [p for p in out if p is not None]


def find_duplicates(questions: Mapping[str, str], answers: Mapping[str, Parsed], profile: str,
                    settings: MatchSettings | None = None) -> list[tuple[str, str]]:
    """Pairs of ids in one benchmark holding the same problem (numbers agreeing at
    ``duplicate_numbers``, text at ``duplicate_text``) with keys that grade different."""
    s = settings or MatchSettings()
    docs = [d for d in (_doc(pid, q) for pid, q in questions.items()) if len(d.nums) >= 2]
    out = []
    for i, a in enumerate(docs):
        for b in docs[i + 1:]:
            if _multiset_jaccard(a.numc, b.numc) < s.duplicate_numbers:
                continue
            ka, kb = answers.get(a.id), answers.get(b.id)
            if ka is None or kb is None or grade_parsed(ka, kb, profile):
                continue
            if difflib.SequenceMatcher(None, a.words, b.words, autojunk=False).ratio() >= s.duplicate_text:
                out.append((a.id, b.id))
    return out


def variant_report(benchmark: str, variant: str, questions: Mapping[str, str], keys: Mapping[str, Parsed],
                   vquestions: Mapping[str, str], vkeys: Mapping[str, Parsed], profile: str = DEFAULT_PROFILE,
                   settings: MatchSettings | None = None) -> VariantReport:
    pairs = match_variants(questions, vquestions, settings)
    dups = [(benchmark, a, b) for a, b in find_duplicates(questions, keys, profile, settings)]
    dups += [(variant, a, b) for a, b in find_duplicates(vquestions, vkeys, profile, settings)]
    return VariantReport(benchmark, variant, pairs, dups)


# -- the verdicts ---------------------------------------------------------------------------------


@dataclass
class AuditRow:
    benchmark: str
    problem_id: str
    key: str
    verdict: str
    alternative: str
    evidence: str
    support: str
    why: str
    support_trajectories: int = 0
    support_models: int = 0
    support_formulations: int = 0
    key_trajectories: int = 0
    solved_trajectories: int = 0
    trajectories: int = 0
    variant: str = ""
    variant_key: str = ""
    variant_match: str = ""
    duplicate_of: str = ""


def show(value: Parsed) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return f"{float(value):.10g}"


@dataclass
class Finding:
    kind: str
    alternative: Parsed
    why: str


def consensus_finding(ev: ProblemEvidence, key: Parsed, profile: str, s: AuditSettings
                      ) -> tuple[Finding | None, Cluster | None, int, str]:
    """(finding or None, the leading non-key cluster, trajectories reaching the key, why it did not fire)."""
    solved = ev.solved
    cl = clusters(ev, profile)
    on_key = sum(c.n for c in cl if key is not None and grade_parsed(c.value, key, profile))
    alt = next((c for c in cl if key is None or not grade_parsed(c.value, key, profile)), None)
    if alt is None or solved == 0:
        return None, alt, on_key, "no solve-sourced answer off the key"
    share = alt.n / solved
    key_share = on_key / solved
    indep = alt.independent(s.independence)
    misses = []
    if indep < s.min_independent:
        misses.append(f"{indep} independent {s.independence} < {s.min_independent}")
    if alt.n < s.min_trajectories:
        misses.append(f"{alt.n} trajectories < {s.min_trajectories}")
    if share < s.min_share:
        misses.append(f"share {share:.2f} < {s.min_share}")
    if any(c is not alt and c.n >= alt.n for c in cl):
        misses.append(f"{show(alt.value)} is not the largest group of answers")
    if key_share > s.max_key_share:
        misses.append(f"the key is reached by {on_key}/{solved} solves")
    if misses:
        return None, alt, on_key, "; ".join(misses)
    why = (f"{alt.n} of {solved} solve-sourced answers ({alt.support()}) agree on {show(alt.value)}, "
           f"{on_key} reach the key")
    return Finding("consensus", alt.value, why), alt, on_key, ""


def reference_finding(ev: ProblemEvidence, key: Parsed, profile: str) -> Finding | None:
    """Trajectories with the reference's formulation solved to a value off the key, none on it."""
    same = [c for c in clusters(ev, profile) if c.reference_same]
    if not same or key is None:
        return None
    if any(grade_parsed(c.value, key, profile) for c in same):
        return None
    top = max(same, key=lambda c: c.reference_same)
    return Finding("reference", top.value, f"{top.reference_same} solve(s) of the reference's own formulation give "
                                           f"{show(top.value)}")


def audit_problem(benchmark: str, pid: str, key: Parsed, ev: ProblemEvidence | None, profile: str,
                  settings: AuditSettings, variant: tuple[str, Parsed, VariantPair] | None = None,
                  duplicate_of: str = "") -> AuditRow:
    """One problem's verdict from its ledger evidence and its variant match (if any)."""
    ev = ev or ProblemEvidence()
    findings: list[Finding] = []
    vslug, vkey, pair = variant if variant is not None else ("", None, None)
    if pair is not None and pair.status == "matched" and key is not None and vkey is not None \
            and not grade_parsed(vkey, key, profile):
        findings.append(Finding("variants", vkey, f"{vslug} has the same problem ({pair.variant}, same numbers) "
                                                  f"keyed {show(vkey)}"))
    cons, alt, on_key, miss = consensus_finding(ev, key, profile, settings)
    if cons is not None:
        findings.append(cons)
    ref = reference_finding(ev, key, profile)
    if ref is not None:
        findings.append(ref)
    solved = ev.solved
    top = cons or (findings[0] if findings else None)
    support_c = alt if cons is not None else None
    if findings:
        verdict = "suspect"
        why = "; ".join(f.why for f in findings)
        alternative = show(top.alternative) if top else ""
    elif solved and on_key / solved > settings.max_key_share:
        verdict, alternative = "ok", ""
        why = f"{on_key} of {solved} solve-sourced answers reach the key"
    elif pair is not None and pair.status == "matched":
        verdict, alternative = "ok", ""
        why = f"{vslug} has the same problem ({pair.variant}) with the same key"
    else:
        verdict, alternative = "unknown", ""
        why = ("no solve-sourced answer" if not solved else f"inconclusive: {miss}")
    if duplicate_of:
        why += (f"; {duplicate_of} in the same benchmark is a near-duplicate (same or nearly the same numbers "
                "and text) keyed differently")
    return AuditRow(
        benchmark=benchmark, problem_id=pid, key=show(key), verdict=verdict, alternative=alternative,
        evidence=",".join(k for k in EVIDENCE_KINDS if any(f.kind == k for f in findings)),
        support=support_c.support() if support_c is not None else "", why=why,
        support_trajectories=support_c.n if support_c else 0,
        support_models=len(support_c.models) if support_c else 0,
        support_formulations=len(support_c.fingerprints) if support_c else 0,
        key_trajectories=on_key, solved_trajectories=solved, trajectories=ev.trajectories,
        variant=vslug if pair is not None else "", variant_key=show(vkey) if pair is not None else "",
        variant_match=(f"{pair.status}:{pair.variant}" if pair.variant else pair.status) if pair is not None else "",
        duplicate_of=duplicate_of)


def audit(keys: Mapping[str, Mapping[str, Parsed]], collector: Collector | None = None,
          settings: AuditSettings | None = None, variants: Mapping[str, tuple[str, Mapping[str, Parsed],
                                                                             VariantReport]] | None = None,
          profiles: Mapping[str, str] | None = None) -> list[AuditRow]:
    """Every problem of ``keys`` (benchmark -> id -> parsed key), in order.

    ``variants``: benchmark -> (variant slug, the variant's keys, the report matching the two, with
    the benchmark as the report's ``original`` side). ``profiles``: the grading profile per
    benchmark (default: the ledger rows' own, else optagentbench)."""
    s = settings or AuditSettings()
    problems = collector.problems if collector is not None else {}
    out = []
    for bench, answers in keys.items():
        vinfo = (variants or {}).get(bench)
        by_pid: dict[str, VariantPair] = {}
        dup: dict[str, str] = {}
        if vinfo is not None:
            by_pid = {p.original: p for p in vinfo[2].pairs}
            for b, a, c in vinfo[2].duplicates:
                if b == bench:
                    dup[a], dup[c] = c, a
        for pid, key in answers.items():
            ev = problems.get((bench, pid))
            profile = (profiles or {}).get(bench) or (ev.profile if ev is not None and ev.profile else DEFAULT_PROFILE)
            variant = None
            if vinfo is not None and pid in by_pid:
                pair = by_pid[pid]
                variant = (vinfo[0], vinfo[1].get(pair.variant) if pair.variant else None, pair)
            out.append(audit_problem(bench, pid, key, ev, profile, s, variant, dup.get(pid, "")))
    return out


def invert(report: VariantReport) -> VariantReport:
    """The same matches seen from the variant's side (so ``@sirl`` rows get their evidence too)."""
    pairs = [VariantPair(p.variant, p.original, p.status, p.text, p.nums, p.note) for p in report.pairs if p.variant]
    return VariantReport(report.variant, report.benchmark, pairs, report.duplicates)


def parse_key(value: Any) -> Parsed:
    return parse_submission(value)


def rows_as_dicts(rows: Iterable[AuditRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


def summary(rows: Iterable[AuditRow]) -> dict[str, dict[str, int]]:
    """benchmark -> counts of verdicts and of each evidence kind among the suspects."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        c = out.setdefault(r.benchmark, {"problems": 0, **dict.fromkeys(VERDICTS, 0), **dict.fromkeys(EVIDENCE_KINDS, 0)})
        c["problems"] += 1
        c[r.verdict] += 1
        for k in r.evidence.split(","):
            if k:
                c[k] += 1
    return out


def recall_precision(rows: Iterable[AuditRow], changed: set[tuple[str, str]], kind: str | None = "consensus"
                     ) -> tuple[float, float, int]:
    """(recall, precision, flags) of the suspects (with evidence ``kind``; None: any) against the
    problems whose keys were changed on purpose. Precision of no flag is 1.0."""
    flagged = {(r.benchmark, r.problem_id) for r in rows
               if r.verdict == "suspect" and (kind is None or kind in r.evidence.split(","))}
    hit = len(flagged & changed)
    recall = hit / len(changed) if changed else 1.0
    precision = hit / len(flagged) if flagged else 1.0
    return recall, precision, len(flagged)
