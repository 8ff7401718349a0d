"""Which of a page's two directions (as prepared, turned 180°) was read the right way up, when the prepare stage
was unsure: a passing check first, then zone lines read as such, then the reading's score."""

from __future__ import annotations

from pipeline.extract.ocr.backend import upright_evidence
from pipeline.formats.document import read_document
from tests.unit.test_fields_document import TD3, TODAY, page

PRINTED = ("PASSPORT", "Surname", "ERIKSSON", "Given names", "ANNA MARIA", "Date of expiry", "15 APR 2012")
# the zone's lines cut short, as a dark photo's detector may box them: a zone, but none decodes from it
CUT_ZONE = (TD3[0][:19], TD3[1][:26])
# the same page read upside down: letters become other letters, and one box has a number's shape
UPSIDE_DOWN = ("Code/code", "UNIDD KOM", "PASSORT", "L89B902", "FZ888957")


def evidence(*rows: str, score: float = 0.98) -> tuple[bool, int, float]:
    lines = page(*rows, score=score)
    return upright_evidence(read_document(lines, TODAY), lines)


def test_a_zone_read_as_one_outweighs_a_better_scored_reading_without_one() -> None:
    upright = evidence(*PRINTED[:1], *CUT_ZONE, score=0.5)
    turned = evidence(*UPSIDE_DOWN)
    assert not upright[0] and not turned[0]  # neither passes a check
    assert turned[2] > upright[2]  # the turned reading scores better ...
    assert upright > turned  # ... but only the upright one read the zone's fillers


def test_a_passing_check_outweighs_everything() -> None:
    decoded = evidence(*TD3, score=0.6)
    assert decoded[0] and decoded > evidence(*PRINTED, *CUT_ZONE)


def test_without_checks_or_zone_lines_the_better_score_wins() -> None:
    labelled = evidence(*PRINTED)
    assert labelled[:2] == (False, 0) and labelled > evidence(*UPSIDE_DOWN, score=0.7)
