"""The `DocumentFormat` protocol and the registry of formats that reads a page and answers for validation
and calibration.

Reading order: every format with a machine-readable zone looks for its zone and the best-checked zone wins
(check digits are the strongest evidence on a page; a tie goes to the format registered first); failing
that, the other formats are asked in registration order and the first that recognises the page reads it.
The last one registered (the printed zone) recognises every page.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pipeline.formats.reading import DOCUMENT_NUMBER, Builder, DocumentReading, DocumentType, Page

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class NumberCheck:
    """A checksum a document number must pass: `name` is stored in the record's `checks` when it passes,
    `failure` explains a failure; `shape` (for a format's `stray_number_checks`) is the number shape that
    carries this check character whatever document type the number is claimed to be on."""

    name: str
    passes: Callable[[str], bool]
    failure: str
    shape: re.Pattern[str] | None = None


class DocumentFormat(Protocol[T]):
    """One kind of document: how to recognise its page, read its fields, and the checks its values obey.

    `find` returns what of this format the page shows (its zone, its sides) or None when the page is not one; `read`
    turns that into fields, states and checks in `b` and returns the doc type it read. A format with `has_zone`
    competes with the other zones by `zone_score`. The rest serves the stages after reading: `number_checks` (doc
    type -> the checksum its document number must pass), `stray_number_checks`, `long_term` (doc type -> who holds a
    document valid for life, for the error message), `refuting_checks` (failed check -> the field it proves misread:
    validate leaves that field unreadable, the others stand), `disagreements` (failed checks that mean two sources
    of a field disagree -> that field: never auto-accepted, `pipeline.trust.rules`), `evidence_source` (the
    calibration class of a field's evidence, None when the checks show none of this format's), `may_carry_mrz` (an
    MRZ re-read can help a page this format read), `settled_by_zone` (a fully checked zone decides the reading: the
    printed zone only confirms it, so OCR may stop reading the page early) and `number_shape` (what a document
    number of this format looks like, upper case without spaces: a reading without that shape is unreadable, not
    stored). `issuer`: the state that issues every document of this format (`CHN` for the PRC's cards), None when
    the page says which (a zone's issuer code, a national front's title). `read_alone`: the fields whose only
    evidence is the recogniser's reading of one box (no checksum, no second source on the page); the reader
    measures that box for camera shake (`SHARP_CHECK`), which the format's evidence class then tells apart.
    """

    name: str
    doc_types: tuple[DocumentType, ...]
    has_zone: bool
    may_carry_mrz: bool
    settled_by_zone: bool
    number_shape: re.Pattern[str]
    number_checks: Mapping[DocumentType, NumberCheck]
    stray_number_checks: tuple[NumberCheck, ...]
    long_term: Mapping[DocumentType, str]
    refuting_checks: Mapping[str, str]
    disagreements: Mapping[str, str]
    issuer: str | None
    read_alone: tuple[str, ...]

    def find(self, page: Page) -> T | None: ...
    def read(self, found: T, page: Page, b: Builder) -> DocumentType: ...
    def zone_score(self, found: T) -> float: ...
    def evidence_source(self, field: str, doc_type: str | None, checks: list[str],
                        failures: list[str]) -> str | None: ...


class FormatDefaults:
    """Defaults for a `DocumentFormat` without a zone, checksums or calibration classes of its own."""

    has_zone = False
    may_carry_mrz = True
    settled_by_zone = False
    number_shape: re.Pattern[str] = DOCUMENT_NUMBER
    number_checks: Mapping[DocumentType, NumberCheck] = {}
    stray_number_checks: tuple[NumberCheck, ...] = ()
    long_term: Mapping[DocumentType, str] = {}
    refuting_checks: Mapping[str, str] = {}
    disagreements: Mapping[str, str] = {}
    issuer: str | None = None
    read_alone: tuple[str, ...] = ()

    def zone_score(self, found: Any) -> float:
        raise TypeError(f"{type(self).__name__} has no machine-readable zone")

    def evidence_source(self, field: str, doc_type: str | None, checks: list[str],
                        failures: list[str]) -> str | None:
        return None


# passed when every field of the format's `read_alone` was read from a sharp box, failed when one was read from a
# box smeared by camera shake (`pipeline.extract.ocr.shake`): a recogniser's score says nothing of such a box
SHARP_CHECK = "capture.field_sharp"
# the suffix of the evidence class of a field read alone from a shaken box (`SHARP_CHECK` failed): no table lifts
# such a class to the auto-accept threshold (`pipeline.trust.rules.ceiling`)
SHAKEN_CLASS = "_shaken"
PRINTED_EVIDENCE = "printed"  # the calibration class of a field no format's checks vouch for


class Registry:
    """The document formats, in reading order (see the module docstring)."""

    def __init__(self, formats: Sequence[DocumentFormat[Any]]) -> None:
        self._formats: list[DocumentFormat[Any]] = []
        for fmt in formats:
            self.register(fmt)

    def __iter__(self) -> Iterator[DocumentFormat[Any]]:
        return iter(list(self._formats))

    def get(self, name: str) -> DocumentFormat[Any]:
        for fmt in self._formats:
            if fmt.name == name:
                return fmt
        raise KeyError(f"no document format {name!r}")

    def register(self, fmt: DocumentFormat[Any], *, before: str | None = None) -> None:
        """Add `fmt` at the end, or just before the format named `before`."""
        if any(f.name == fmt.name for f in self._formats):
            raise ValueError(f"document format {fmt.name!r} is already registered")
        index = self._formats.index(self.get(before)) if before is not None else len(self._formats)
        self._formats.insert(index, fmt)

    def unregister(self, name: str) -> None:
        self._formats.remove(self.get(name))

    def doc_types(self) -> tuple[DocumentType, ...]:
        """Every doc type a registered format can read, in registration order."""
        return tuple(dict.fromkeys(t for fmt in self._formats for t in fmt.doc_types))

    # ----------------------------------------------------------------------------------- reading

    def read(self, page: Page) -> DocumentReading:
        """The page read by the format that recognises it (see the module docstring)."""
        zones = [(fmt, zone) for fmt in self._formats if fmt.has_zone and (zone := fmt.find(page)) is not None]
        if zones:
            return _read_with(*max(zones, key=lambda hit: hit[0].zone_score(hit[1])), page)
        for fmt in self._formats:
            if not fmt.has_zone and (found := fmt.find(page)) is not None:
                return _read_with(fmt, found, page)
        raise LookupError("no registered document format reads this page")

    # -------------------------------------------------------------------------------- validation

    def number_check(self, doc_type: str | None, number: str) -> NumberCheck | None:
        """The checksum `number` must pass: the one of its document type, or, on any other type, a check
        whose number shape it has (a model answer must not escape the check by naming another type)."""
        for fmt in self._formats:
            if isinstance(doc_type, str) and doc_type in fmt.number_checks:
                return fmt.number_checks[doc_type]
        for fmt in self._formats:
            for check in fmt.stray_number_checks:
                if check.shape is not None and check.shape.fullmatch(number.upper()):
                    return check
        return None

    def long_term(self) -> dict[DocumentType, str]:
        """Doc types valid for life ("long-term" expiry) -> who holds such a document."""
        return {t: holder for fmt in self._formats for t, holder in fmt.long_term.items()}

    def issuer_of(self, doc_type: object) -> str | None:
        """The state that issues every document of this type (`CHN` for a PRC resident ID card), or None when
        documents of the type come from many states (the page's zone or title says which)."""
        issuers = {fmt.issuer for fmt in self._formats if isinstance(doc_type, str) and doc_type in fmt.doc_types}
        return issuers.pop() if len(issuers) == 1 else None

    def valid_for_life(self, doc_type: object) -> bool:
        """Whether a document of this type may say "long-term" (长期) for its expiry."""
        return isinstance(doc_type, str) and doc_type in self.long_term()

    def refuting_checks(self) -> dict[str, str]:
        """Backend checks whose failure proves one field misread -> that field."""
        return {check: field for fmt in self._formats for check, field in fmt.refuting_checks.items()}

    # ------------------------------------------------------------------------------- calibration

    def disagreeing_fields(self, failures: Sequence[str]) -> set[str]:
        """The fields whose sources disagree, from a reading's failed checks (any format's)."""
        return {field for fmt in self._formats for check, field in fmt.disagreements.items() if check in failures}

    def evidence_source(self, field: str, doc_type: str | None, checks: list[str], failures: list[str]) -> str:
        """The kind of evidence behind one present field: asked first of the formats that read this doc type
        (a resident ID's checksum decides its class), then of every format, whose checks may show in a reading
        of any type; `printed` when no format's checks vouch for it."""
        owners = [fmt for fmt in self._formats if doc_type in fmt.doc_types]
        for fmt in [*owners, *self._formats]:
            source = fmt.evidence_source(field, doc_type, checks, failures)
            if source is not None:
                return source
        return PRINTED_EVIDENCE


def _read_with(fmt: DocumentFormat[T], found: T, page: Page) -> DocumentReading:
    b = Builder(number_shape=fmt.number_shape)
    doc_type = fmt.read(found, page, b)
    b.issuer = b.issuer or fmt.issuer
    if doc_type not in fmt.doc_types:  # the schema and the prompts offer only the declared types
        raise ValueError(f"format {fmt.name!r} read a {doc_type!r}, not one of its doc types {fmt.doc_types}")
    return b.finish(doc_type, fmt.name)
