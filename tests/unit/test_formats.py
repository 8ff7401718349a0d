"""The document-format registry: one list of formats that reading, validation, calibration, the schema and the
prompts all follow, so that adding a format is its module, its registration and its tests."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

from pipeline.datamodel import DocumentRef, Extraction, Reason
from pipeline.extract.hybrid import passes_checks
from pipeline.extract.model.prompts import load_prompt
from pipeline.formats.document import read_document
from pipeline.formats.lines import line_score
from pipeline.formats.reading import Builder, Page
from pipeline.formats.registered import FORMATS, FormatDefaults, NumberCheck
from pipeline.settings import SCHEMA_PATH
from pipeline.trust.table import evidence_class
from pipeline.validate import refuted_fields, semantic_problems
from tests.support.paths import REPO as ROOT
from tests.unit.test_fields_document import TD3, page, states

TODAY = date(2026, 6, 1)


# ------------------------------------------------------------------------ one list of doc types


def _prompt_doc_types(lang: str) -> set[str]:
    """The doc types the extraction prompt offers: the quoted type names on its "doc_type" line."""
    [line] = [x for x in load_prompt(lang).splitlines() if x.lstrip("- ").startswith('"doc_type"')]
    return set(re.findall(r'"([a-z_]+)"', line)) - {"doc_type"}


def test_the_schema_enum_and_both_prompts_offer_exactly_the_registered_doc_types() -> None:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))["properties"]["doc_type"]
    registered = set(FORMATS.doc_types())

    assert len(schema["enum"]) == len(set(schema["enum"]))
    assert set(schema["enum"]) == registered
    assert _prompt_doc_types("en") == registered
    assert _prompt_doc_types("zh") == registered
    # the schema's description explains every type ("cn_id = PRC resident ID card ...")
    assert [t for t in registered if f"{t} = " not in schema["description"]] == []


def test_every_format_has_a_unique_name_and_the_printed_zone_reads_last() -> None:
    formats = list(FORMATS)
    assert len({f.name for f in formats}) == len(formats)
    assert formats[-1].name == "printed"  # recognises every page: anything after it would never be asked


# --------------------------------------------------------------- a format added by registration only


def _check_digit_ok(number: str) -> bool:
    """Toy rule: the last digit is the sum of the others mod 10."""
    digits = number[2:]
    return digits.isdigit() and sum(map(int, digits[:-1])) % 10 == int(digits[-1])


LIBRARY_CHECK = NumberCheck("library.checksum", _check_digit_ok, "the last digit is not the sum of the others")
_CARD_NUMBER = re.compile(r"\bLC\d{7}\b")


class LibraryCardFormat(FormatDefaults):
    """A city library card: title "LIBRARY CARD", holder's name under "Name", number LC + 6 digits + check."""

    name = "library_card"
    doc_types = ("library_card",)
    number_checks = {"library_card": LIBRARY_CHECK}
    refuting_checks = {"library.checksum": "id_number"}

    def find(self, page: Page) -> Page | None:
        return page if any("LIBRARY CARD" in t.upper() for t in page.texts) else None

    def read(self, found: Page, page: Page, b: Builder) -> str:
        numbers = [m.group(0) for t in page.texts for m in _CARD_NUMBER.finditer(t)]
        if numbers:
            ok = _check_digit_ok(numbers[0])
            (b.checks if ok else b.failures).append(LIBRARY_CHECK.name)
            b.present("id_number", numbers[0], line_score(page.lines, numbers[0]) * (1.0 if ok else 0.5))
        name = page.printed.values.get("name")
        if name is not None:
            b.present("name", name[0], name[1])
        b.absent("expiry_date")  # the card has none
        return "library_card"

    def evidence_source(self, field: str, doc_type: str | None, checks: list[str],
                        failures: list[str]) -> str | None:
        return "library.checked" if doc_type == "library_card" and LIBRARY_CHECK.name in checks else None


@pytest.fixture
def library_card() -> Iterator[LibraryCardFormat]:
    fmt = LibraryCardFormat()
    FORMATS.register(fmt, before="printed")
    try:
        yield fmt
    finally:
        FORMATS.unregister(fmt.name)


def test_a_registered_format_is_read_by_read_document(library_card: LibraryCardFormat) -> None:
    lines = page("CITY LIBRARY CARD", "Name", "DOE JANE", "LC1234561", score=0.9)

    r = read_document(lines, TODAY)

    assert (r.doc_type, r.format) == ("library_card", "library_card")
    assert r.fields == {"name": "DOE JANE", "id_number": "LC1234561", "expiry_date": None}
    assert states(r) == {"name": "present", "id_number": "present", "expiry_date": "absent"}
    assert r.checks == ["library.checksum"] and r.check_failures == []
    assert "library_card" in FORMATS.doc_types()


def test_without_its_registration_the_same_page_is_only_printed_text() -> None:
    r = read_document(page("CITY LIBRARY CARD", "Name", "DOE JANE", "LC1234565", score=0.9), TODAY)
    assert (r.doc_type, r.format) == ("unknown", "printed")
    assert r.checks == []


def test_a_zone_still_wins_over_a_registered_page_format(library_card: LibraryCardFormat) -> None:
    r = read_document(page("LIBRARY CARD", "Surname", "ERIKSSON", "Given names", "ANNA MARIA", *TD3), TODAY)
    assert (r.doc_type, r.format) == ("passport", "icao_mrz")


def test_validation_and_calibration_take_a_registered_formats_checks(library_card: LibraryCardFormat) -> None:
    answer = {"doc_type": "library_card", "name": "DOE JANE", "expiry_date": None, "orientation": "landscape"}

    assert semantic_problems({**answer, "id_number": "LC1234561"}) == []
    assert semantic_problems({**answer, "id_number": "LC1234565"}) == [
        (Reason.CHECKSUM_FAILED, "library.checksum: the last digit is not the sum of the others")]
    assert FORMATS.refuting_checks()["library.checksum"] == "id_number"
    reading = Extraction(ref=DocumentRef(Path("c.png"), "c.png", "0" * 64), backend="ocr", model="m",
                         fields={**answer, "id_number": "LC1234561"}, check_failures=["library.checksum"])
    assert refuted_fields(reading) == {"id_number": "library.checksum"}  # a digit the card's reader saw fail
    assert not passes_checks(reading)  # the hybrid backend sends it to the VLM: it asks the registry when judging
    assert evidence_class("id_number", "library_card", ["library.checksum"], []) == "id_number/library.checked"
    assert evidence_class("id_number", "library_card", [], []) == "id_number/printed"


def test_registering_a_name_twice_or_before_an_unknown_format_is_refused(library_card: LibraryCardFormat) -> None:
    with pytest.raises(ValueError, match="already registered"):
        FORMATS.register(LibraryCardFormat())
    with pytest.raises(KeyError):
        FORMATS.register(type("Other", (LibraryCardFormat,), {"name": "other"})(), before="no_such_format")
    assert [f.name for f in FORMATS].count("library_card") == 1


# ------------------------------------------------------------- the formats' own rules, kept as before


def test_a_resident_id_field_is_classed_by_its_checksum_even_beside_zone_checks() -> None:
    assert evidence_class("id_number", "cn_id", ["cn_id.checksum", "mrz.number"], []) == "id_number/cn.passed"
    assert evidence_class("name", "unknown", ["mrz.number"], []) == "name/mrz.name_vs_printed_none"
    assert evidence_class("name", "cn_permanent_residence", ["cn_pr.checksum"], []) == "name/printed"


def test_only_a_resident_id_page_and_a_card_front_whose_zone_is_on_its_back_are_never_reread_for_an_mrz() -> None:
    assert [f.name for f in FORMATS if not f.may_carry_mrz] == ["cn_id", "licence_front", "national_front"]
    assert [f.name for f in FORMATS if f.settled_by_zone] == ["icao_mrz"]


# ------------------------------------------------ no branching on a doc type outside the format modules

# The product's code. Not synth/ (it renders each kind of specimen) nor bench/ and tools/ (they select
# ground-truth items by type, e.g. the ICAO ones for a comparison with an MRZ-only reader).
SOURCE_DIRS = ("pipeline", "flows", "idflow")
FORMAT_MODULES = ROOT / "pipeline" / "fields" / "formats"


def _mentions_doc_type(node: ast.AST) -> bool:
    """`doc_type`, `x.doc_type`, `x.get("doc_type")`, `x["doc_type"]`."""
    if isinstance(node, ast.Name):
        return node.id == "doc_type"
    if isinstance(node, ast.Attribute):
        return node.attr == "doc_type"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "doc_type"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "doc_type"
    return False


def _literals(node: ast.AST, constants: dict[str, set[str]]) -> set[str]:
    """The strings `node` writes out, directly or through a module-level constant."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {v for elt in node.elts for v in _literals(elt, constants)}
    if isinstance(node, ast.Name):
        return constants.get(node.id, set())
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("frozenset", "set", "tuple"):
        return {v for arg in node.args for v in _literals(arg, constants)}
    return set()


def doc_type_branches(source: str, doc_types: set[str]) -> list[int]:
    """Lines comparing a doc type with one of `doc_types` written out (==, !=, in, not in), also by way of a
    module-level constant (`_ICAO_TYPES = ("passport", ...)`)."""
    tree = ast.parse(source)
    constants = {target.id: _literals(stmt.value, {}) for stmt in tree.body if isinstance(stmt, ast.Assign)
                 for target in stmt.targets if isinstance(target, ast.Name)}
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(map(_mentions_doc_type, operands)) and any(_literals(x, constants) & doc_types for x in operands):
                hits.append(node.lineno)
    return sorted(hits)


def test_the_branch_finder_sees_every_spelling() -> None:
    found = doc_type_branches(
        'a = r.doc_type == "cn_id"\nb = f.get("doc_type") != "visa"\nc = doc_type in ("passport", "x")\n'
        'd = f["doc_type"] not in ["cn_id"]\ne = doc_type == other\nTYPES = ("visa",)\nf = doc_type in TYPES\n'
        'SET = frozenset({"cn_id"})\ng = e.get("doc_type") in SET\n', {"cn_id", "visa", "passport"})
    assert found == [1, 2, 3, 4, 7, 9]


def test_no_doc_type_branches_outside_the_format_modules() -> None:
    # "unknown" is what no format recognised: a fallback to another source of the type may test for it
    formats_types = set(FORMATS.doc_types()) - {"unknown"}
    offenders = []
    for folder in SOURCE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if FORMAT_MODULES in path.parents:
                continue
            text = path.read_text(encoding="utf-8")
            offenders += [f"{path.relative_to(ROOT)}:{n}" for n in doc_type_branches(text, formats_types)]
            offenders += [f"{path.relative_to(ROOT)}: {m.group(0)}"
                          for m in re.finditer(r"(isinstance|getattr)\(zone\b", text)]
    assert offenders == []


def test_a_format_cannot_read_a_doc_type_it_did_not_declare() -> None:
    class Undeclared(LibraryCardFormat):
        name = "undeclared"
        doc_types = ("unknown",)  # but `read` says "library_card", which no schema or prompt offers

    FORMATS.register(Undeclared(), before="printed")
    try:
        with pytest.raises(ValueError, match="not one of its doc types"):
            read_document(page("CITY LIBRARY CARD", "LC1234561"), TODAY)
    finally:
        FORMATS.unregister("undeclared")


def test_the_issuer_is_what_the_page_states_and_the_prc_for_its_cards() -> None:
    """A zone's issuer code (Germany's `D` stored as DEU, a misread that is no code stored as nothing); CHN for a
    type only the PRC issues, from the format, whatever reads it (the VLM answers' judge asks the same registry)."""
    from pipeline.extract.model.answer_evidence import AnswerEvidence, judge
    from pipeline.formats.zone import issuer_code

    reading = read_document(page("PASSPORT", "Surname", "ERIKSSON", "Given names", "ANNA MARIA", "L898902C3", *TD3),
                            date(2024, 1, 1))
    assert (reading.doc_type, reading.issuer) == ("passport", "UTO")
    assert [issuer_code(c) for c in ("UTO", "D", "", None, "U7O", "UTOX")] == ["UTO", "DEU", None, None, None, None]
    assert (FORMATS.issuer_of("cn_id"), FORMATS.issuer_of("cn_permanent_residence")) == ("CHN", "CHN")
    assert FORMATS.issuer_of("passport") is None and FORMATS.issuer_of("id_card") is None
    answer = {"doc_type": "passport", "name": "ERIKSSON ANNA MARIA", "id_number": "L898902C3",
              "expiry_date": "2012-04-15", "orientation": "landscape"}
    assert judge(answer, AnswerEvidence(mrz=tuple(TD3)), None, date(2010, 1, 1)).issuer == "UTO"
    assert judge(answer, AnswerEvidence(), None, date(2010, 1, 1)).issuer is None  # no zone: nothing states it
    prc = {**answer, "doc_type": "cn_id", "id_number": "11010519491231002X", "expiry_date": None}
    assert judge(prc, AnswerEvidence(), None).issuer == "CHN"
