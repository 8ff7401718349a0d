"""Typed objects passed between the stages: ingest -> prepare -> extract -> validate -> store.

Every stage returns its own output type or a `Failure`; nothing is raised across a stage boundary for a
bad document, so a run always finishes and `seen == results + failures + skipped` can be checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from pipeline.trust.key import TableKey

Stage = Literal["ingest", "preprocess", "request", "parse", "validate", "internal"]
FieldState = Literal["present", "absent", "unreadable"]
FIELD_NAMES: tuple[str, ...] = ("name", "id_number", "expiry_date")


class Reason(StrEnum):
    """Stable failure reason codes: extend, never rename (they are stored in Parquet)."""

    # ingest
    UNSUPPORTED_TYPE = "unsupported_type"
    EMPTY_FILE = "empty_file"
    UNREADABLE = "unreadable"
    TOO_MANY_PIXELS = "too_many_pixels"
    SYMLINK_OUTSIDE_ROOT = "symlink_outside_root"
    NOT_A_REGULAR_FILE = "not_a_regular_file"  # FIFO, socket, device: never opened
    BROKEN_SYMLINK = "broken_symlink"  # symlink loop, or a target that does not exist
    PATH_TOO_LONG = "path_too_long"  # ENAMETOOLONG: the path cannot even be opened
    TOO_LARGE = "too_large"  # over max_input_bytes (a document is read into memory once)
    CHANGED_DURING_RUN = "changed_during_run"  # bytes differ from the ones hashed at discovery, or vanished
    # preprocess
    DECODE_ERROR = "decode_error"
    TOO_SMALL = "too_small"
    PREPARE_CRASHED = "prepare_crashed"  # a run died preparing it, and the page crashed or hung a child process too
    # request
    TIMEOUT = "timeout"
    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    ENDPOINT_UNAVAILABLE = "endpoint_unavailable"
    AUTH_ERROR = "auth_error"
    BAD_REQUEST = "bad_request"
    # parse
    NO_JSON = "no_json"
    INVALID_JSON = "invalid_json"
    # validate
    SCHEMA_VIOLATION = "schema_violation"
    CHECKSUM_FAILED = "checksum_failed"
    INVALID_DATE = "invalid_date"
    CROSS_CHECK_FAILED = "cross_check_failed"
    NO_FIELDS_FOUND = "no_fields_found"
    # internal: a bug in idflow, not in the document; recorded so the document is not lost
    INTERNAL_ERROR = "internal_error"


RETRYABLE_REASONS: frozenset[Reason] = frozenset(
    {Reason.TIMEOUT, Reason.RATE_LIMITED, Reason.SERVER_ERROR, Reason.ENDPOINT_UNAVAILABLE,
     Reason.CHANGED_DURING_RUN}
)

# The stage that records each reason: "ingest" for problems with the file itself, "preprocess" for its pixels.
REASON_STAGES: dict[Reason, Stage] = {
    **dict.fromkeys([Reason.UNSUPPORTED_TYPE, Reason.EMPTY_FILE, Reason.UNREADABLE, Reason.TOO_MANY_PIXELS,
                     Reason.SYMLINK_OUTSIDE_ROOT, Reason.NOT_A_REGULAR_FILE, Reason.BROKEN_SYMLINK,
                     Reason.PATH_TOO_LONG, Reason.TOO_LARGE, Reason.CHANGED_DURING_RUN], "ingest"),
    **dict.fromkeys([Reason.DECODE_ERROR, Reason.TOO_SMALL, Reason.PREPARE_CRASHED], "preprocess"),
    **dict.fromkeys([Reason.TIMEOUT, Reason.RATE_LIMITED, Reason.SERVER_ERROR, Reason.ENDPOINT_UNAVAILABLE,
                     Reason.AUTH_ERROR, Reason.BAD_REQUEST], "request"),
    **dict.fromkeys([Reason.NO_JSON, Reason.INVALID_JSON], "parse"),
    **dict.fromkeys([Reason.SCHEMA_VIOLATION, Reason.CHECKSUM_FAILED, Reason.INVALID_DATE,
                     Reason.CROSS_CHECK_FAILED, Reason.NO_FIELDS_FOUND], "validate"),
    Reason.INTERNAL_ERROR: "internal",
}


class SkipReason(StrEnum):
    """Why an input was seen but deliberately not processed (counted, never silently dropped)."""

    HIDDEN = "hidden"
    IN_PROGRESS = "in_progress"
    ALREADY_DONE = "already_done"
    DUPLICATE_CONTENT = "duplicate_content"
    MARKER = "marker"  # upload-complete markers such as _READY
    DIRECTORY_SYMLINK = "directory_symlink"  # not followed (no loops); its target inside the root is walked anyway


@dataclass(frozen=True, slots=True)
class DocumentRef:
    """One page of one input file. `key` identifies it across runs (content hash + page)."""

    path: Path
    rel_path: str
    sha256: str
    page: int = 0
    page_count: int = 1

    @property
    def key(self) -> str:
        return f"{self.sha256}:{self.page}"


@dataclass(frozen=True, slots=True)
class Skipped:
    rel_path: str
    reason: SkipReason
    sha256: str | None = None
    page: int | None = None


@dataclass(slots=True)
class Failure:
    """A document that could not be turned into a record, with the stage and a stable reason code."""

    rel_path: str
    sha256: str | None
    page: int | None
    stage: Stage
    reason: Reason
    detail: str
    attempts: int = 1
    raw_response: str | None = None
    backend: str | None = None
    # What the endpoint billed for this document before it failed (run summary cost; not stored per row).
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def retryable(self) -> bool:
        return self.reason in RETRYABLE_REASONS

    @classmethod
    def for_ref(cls, ref: DocumentRef, stage: Stage, reason: Reason, detail: str, **kw: Any) -> Failure:
        return cls(rel_path=ref.rel_path, sha256=ref.sha256, page=ref.page, stage=stage, reason=reason,
                   detail=detail, **kw)


@dataclass(slots=True)
class PreparedImage:
    """A page decoded, oriented upright and resized to the token budget, ready for any backend.

    `pixels` is an RGB uint8 array of exactly `sent_size` (width, height); both sides are multiples of the
    visual patch, so `visual_tokens` is what a Qwen3.5-class model will be charged for the image.
    """

    ref: DocumentRef
    pixels: Any  # numpy.ndarray (H, W, 3) uint8 RGB
    original_size: tuple[int, int]
    sent_size: tuple[int, int]
    rotation_applied: int  # degrees clockwise applied to make the page upright: 0/90/180/270
    skew_corrected: float  # degrees of small-angle deskew applied
    orientation: Literal["landscape", "portrait"]
    visual_tokens: int
    # Full-resolution upright page (before the budget resize, capped at 2400 px; a small skewed capture enlarged
    # to 1024 px before its deskew) for backends that read small print better above the VLM budget (the
    # embedded OCR). None when it has no more pixels than `pixels`.
    full_pixels: Any = None
    # How sure the text-direction vote was (0.5-1; 0 when no text line was found).
    orientation_confidence: float = 0.0
    # The page as a backend that sends images sends it (JPEG of `pixels`), made on the preparation thread
    # (`ExtractionBackend.pack`); `pixels` is then None: what reads the page again decodes this.
    sent_jpeg: bytes | None = None


@dataclass(slots=True)
class FieldReading:
    """One field as read from the page: value (None unless present), state and confidence in [0, 1]; None is
    unknown (no calibration table was fitted for the backend, model and prompt that read it)."""

    value: str | None
    state: FieldState
    confidence: float | None

    @classmethod
    def absent(cls) -> FieldReading:
        return cls(None, "absent", 1.0)


@dataclass(slots=True)
class Extraction:
    """What a backend read from one page, before validation. `fields` holds the schema keys; confidences are raw
    scores until the validate stage scores them (`pipeline.trust.table.Trust`)."""

    ref: DocumentRef
    fields: dict[str, Any]
    backend: str
    model: str
    field_states: dict[str, FieldReading] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)  # checks the backend already passed (e.g. mrz.number)
    check_failures: list[str] = field(default_factory=list)  # checks that failed, e.g. cross-checks
    raw_response: str | None = None
    endpoint: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    attempts: int = 1
    # Extra clockwise rotation the backend found the page needed (the OCR keeps a 180° reading whose
    # checksums pass); added to PreparedImage.rotation_applied in the results.
    rotation_correction: int = 0
    # Present field -> its evidence class, where the backend names it (a VLM answer's; else the checks decide).
    evidence: dict[str, str] = field(default_factory=dict)
    # The calibration table that scored the confidences (`pipeline.trust.table`: key and hash); None: unknown, or
    # not scored yet.
    calibration: str | None = None
    # The issuing state or country where the document states it (its zone's issuer code, `CHN` for a PRC card,
    # a national front's country); None where nothing on the page states it.
    issuer: str | None = None
    # Present field -> the embedded path's evidence for the same value, (its class, its raw score): a VLM
    # answer's field proven by its own check digits, or read alike by the embedded OCR. The embedded table's
    # confidence for it is the field's floor (`pipeline.trust.table.floored`).
    embedded: dict[str, tuple[str, float]] = field(default_factory=dict)
    # The calibration table that measures the raw scores above (`pipeline.trust.table.Trust` scores them after
    # validation); None: the embedded OCR's.
    table_key: TableKey | None = None


@dataclass(slots=True)
class Record:
    """A validated extraction plus everything the results table needs about how it was made."""

    extraction: Extraction
    prepared: PreparedImage
    checks: list[str]
    expiry_date: str | None  # ISO date or None
    expiry_long_term: bool


Outcome = Record | Failure
