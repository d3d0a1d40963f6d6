"""What one trajectory leaves behind, and the single Arrow schema the ledger stores.

Token counts a server did not report are ``None`` (missing), never 0: the paper's
token accounting keeps recorded zero pairs but must not invent them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

# Trajectory.status values. "error" is reserved for infrastructure failures that
# exhausted their retries; it always counts as wrong and stays in the denominator.
STATUS_SUBMITTED = "submitted"
STATUS_NO_SUBMISSION = "no_submission"
STATUS_ERROR = "error"
STATUSES = (STATUS_SUBMITTED, STATUS_NO_SUBMISSION, STATUS_ERROR)


@dataclass
class CallRecord:
    """One model call: usage exactly as the server reported it."""

    turn: int
    purpose: str  # e.g. "generate", "formulate", "revise"
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_prompt_tokens: int | None
    latency_s: float
    finish_reason: str | None
    stage: str | None = None  # protocol stage (CallMeta.stage); None in ledgers written before it existed


@dataclass
class ExecRecord:
    """One execution (a whole program or one session cell)."""

    turn: int
    outcome: str  # ExecResult.outcome
    wall_s: float
    cpu_s: float
    exit_code: int | None
    submission: Any = None  # raw value passed to submit(), if any
    models: list[dict[str, Any]] = field(default_factory=list)
    stdout_tail: str = ""
    stderr_tail: str = ""
    contained: bool = True  # False when the sandbox ran without namespaces
    code: str = ""  # the program or cell that ran (head-capped); "" in ledgers written before it was kept


@dataclass
class Submission:
    """What the trajectory submitted: the raw value and how it was extracted."""

    raw: Any
    extraction: str = "submit"  # extraction profile that produced it
    # SIRL's variable-type forgiveness: what the program with integer<->continuous flipped
    # submitted (run by the sirl harness when the first result is a number or infeasible);
    # grading with forgive_variable_types accepts it when the first submission is wrong
    alternate: Any = None


@dataclass
class Trajectory:
    """The result of ``harness.run``; graded later by the driver, which alone holds answers."""

    model: str
    method: str
    benchmark: str
    problem_id: str
    sample: int
    seed: int
    status: str = STATUS_NO_SUBMISSION
    submission: Submission | None = None
    calls: list[CallRecord] = field(default_factory=list)
    execs: list[ExecRecord] = field(default_factory=list)
    transcript: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    budgets: dict[str, Any] = field(default_factory=dict)
    simulated: bool = False
    wall_s: float = 0.0
    key: str = ""

    # -- token accounting ---------------------------------------------------
    def _sum(self, attr: str) -> int | None:
        vals = [getattr(c, attr) for c in self.calls]
        if not vals or any(v is None for v in vals):
            return None if vals else 0
        return int(sum(vals))

    @property
    def prompt_tokens(self) -> int | None:
        """Sum over calls; None if any call's count is missing (a partial sum would undercount)."""
        return self._sum("prompt_tokens")

    @property
    def completion_tokens(self) -> int | None:
        return self._sum("completion_tokens")

    @property
    def cached_prompt_tokens(self) -> int | None:
        return self._sum("cached_prompt_tokens")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        d = dict(d)
        sub = d.get("submission")
        d["submission"] = Submission(**sub) if isinstance(sub, dict) else sub
        d["calls"] = [CallRecord(**c) if isinstance(c, dict) else c for c in d.get("calls", [])]
        d["execs"] = [ExecRecord(**e) if isinstance(e, dict) else e for e in d.get("execs", [])]
        return cls(**d)


# -- keys -----------------------------------------------------------------------

def config_fingerprint(config: Any) -> str:
    """Stable short hash of a JSON-able config (sorted keys)."""
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def trajectory_key(
    sweep: str, model: str, method: str, benchmark: str, problem_id: str, sample: int, fingerprint: str
) -> str:
    """Stable id of one planned trajectory; the ledger's primary key.

    Readable prefix for humans, hash suffix so a changed config never collides.
    """
    raw = "\x1f".join([sweep, model, method, benchmark, problem_id, str(sample), fingerprint])
    digest = hashlib.sha256(raw.encode()).hexdigest()[:12]
    return f"{model}/{method}/{benchmark}/{problem_id}/{sample}/{digest}"


# -- Arrow schema -----------------------------------------------------------------

# Format 2's nested detail columns (docs/INTERFACES.md "Ledger columns"; encoded and decoded only by
# opteval.evalcore.ledger_detail). Why nested: a JSON transcript stored each call's whole message list, so
# a row grew with the square of its turns; a list of distinct messages with per-call indices grows linearly,
# and Parquet reads a struct field (a call's finish_reason) without parsing text.
CALL_TYPE = pa.struct([
    ("turn", pa.int32()), ("purpose", pa.string()), ("stage", pa.string()),
    ("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64()), ("cached_prompt_tokens", pa.int64()),
    ("latency_s", pa.float64()), ("finish_reason", pa.string()),
    ("prompt", pa.list_(pa.int32())),  # indices into the row's transcript: the messages sent
    ("completion", pa.int32()),  # index of the assistant message {role: assistant, content: completion}
    ("extra", pa.string()),  # JSON of the call's transcript entry beyond these (SemOPT's "semopt"), else null
])
MESSAGE_TYPE = pa.struct([("role", pa.string()), ("content", pa.string()), ("extra", pa.string())])
EXEC_TYPE = pa.struct([
    ("turn", pa.int32()), ("outcome", pa.string()), ("wall_s", pa.float64()), ("cpu_s", pa.float64()),
    ("exit_code", pa.int32()), ("submission", pa.string()), ("models", pa.string()),
    ("stdout_tail", pa.string()), ("stderr_tail", pa.string()), ("contained", pa.bool_()), ("code", pa.string()),
])
ERROR_TYPE = pa.struct([("kind", pa.string()), ("where", pa.string()), ("message", pa.string())])
# the columns whose type differs between formats
FORMAT_COLUMNS = ("calls", "execs", "transcript", "error")


def _ledger_schema(fmt: int) -> pa.Schema:
    nested = fmt >= 2
    return pa.schema(
        [
            pa.field("key", pa.string(), nullable=False),
            pa.field("sweep", pa.string()),
            pa.field("model", pa.string(), nullable=False),
            pa.field("method", pa.string(), nullable=False),
            pa.field("benchmark", pa.string(), nullable=False),
            pa.field("problem_id", pa.string(), nullable=False),
            pa.field("sample", pa.int32(), nullable=False),
            pa.field("seed", pa.int64()),
            pa.field("status", pa.string(), nullable=False),
            # Submission as text: a number's repr, "infeasible", "unbounded" or the raw
            # string; null when nothing was submitted.
            pa.field("submission", pa.string()),
            pa.field("submission_value", pa.float64()),  # parsed number, else null
            pa.field("submission_status", pa.string()),  # parsed status, else null
            pa.field("extraction", pa.string()),
            pa.field("correct", pa.bool_(), nullable=False),
            pa.field("grading_profile", pa.string()),
            pa.field("prompt_tokens", pa.int64()),
            pa.field("completion_tokens", pa.int64()),
            pa.field("cached_prompt_tokens", pa.int64()),
            pa.field("n_calls", pa.int32()),
            pa.field("n_execs", pa.int32()),
            pa.field("exec_ok", pa.int32()),  # executions with outcome ok
            pa.field("first_exec_outcome", pa.string()),
            pa.field("wall_s", pa.float64()),
            pa.field("simulated", pa.bool_(), nullable=False),
            # reason for status=error, or a graded row's last harness note: format 1 the text, format 2
            # {kind, where, message} (docs/errors.md "Error kinds"); read with ledger_detail.error_message
            pa.field("error", ERROR_TYPE if nested else pa.string()),
            pa.field("attempts", pa.int32()),
            pa.field("fingerprint", pa.string()),
            pa.field("committed_at", pa.timestamp("us", tz="UTC")),
            # format 1: JSON text (a list of CallRecord, of ExecRecord, of per-call transcript entries)
            pa.field("calls", pa.list_(CALL_TYPE) if nested else pa.string()),
            pa.field("execs", pa.list_(EXEC_TYPE) if nested else pa.string()),
            pa.field("transcript", pa.list_(MESSAGE_TYPE) if nested else pa.string()),
            pa.field("budgets", pa.string()),  # JSON object (both formats)
            # Issue 36 (opteval.evalcore.formulation; null in ledgers written before: read as unknown).
            # answer_source: solve / unsolved / no_submission. model_fingerprint: the canonical
            # fingerprint of the solve behind the answer, else of the last captured solve, "" when
            # none (the column ``fingerprint`` was already the plan item's). The formulations are
            # stored once per fingerprint under <sweep>/models/ (opteval.sweepcore.ledger.models).
            pa.field("answer_source", pa.string()),
            pa.field("model_fingerprint", pa.string()),
            pa.field("reference_match", pa.string()),  # same / different / unknown
            pa.field("reference_feasible", pa.bool_()),
            pa.field("reference_violation", pa.float64()),
            pa.field("reference_gap", pa.float64()),  # reference objective at the decision vector - its optimum
            pa.field("verify_note", pa.string()),  # why reference_* is what it is; unsupported captures
        ]
    )


# Format 1 (JSON text detail, text error) and format 2 (nested); the manifest's ``format`` says which
# a ledger holds (opteval.sweepcore.ledger.schema). Both have the same column names in the same order.
LEDGER_SCHEMA_V1 = _ledger_schema(1)
LEDGER_SCHEMA = _ledger_schema(2)


def ledger_schema(fmt: int) -> pa.Schema:
    """The row schema of ledger format ``fmt`` (1 or 2)."""
    return LEDGER_SCHEMA_V1 if fmt == 1 else LEDGER_SCHEMA


def empty_table() -> pa.Table:
    """A ledger table with no rows and exactly :data:`LEDGER_SCHEMA` (format 2; for tests and for
    reports over a sweep that has committed nothing yet)."""
    return LEDGER_SCHEMA.empty_table()
