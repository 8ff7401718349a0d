"""The zone's second reader (`pipeline.extract.ocr.mrz_glyphs`) on rendered zones and on the generated sample, and
how its verdict maps to evidence and confidence."""

from __future__ import annotations

import dataclasses
import json
from datetime import date

import cv2
import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from pipeline.datamodel import Extraction, FieldReading
from pipeline.extract.ocr import backend, mrz_glyphs
from pipeline.extract.ocr.mrz_reread import locate_rows_by_shape
from pipeline.formats.national_mrz import names
from pipeline.formats.zone import NAME_TWO_READERS_CHECK, zone_evidence
from pipeline.trust.rules import DISAGREEMENT_CAP, DISAGREES
from pipeline.trust.table import Calibration, shipped
from synth.render import font_path
from tests.support.paths import REPO

FONTS = {"ocrb": font_path("ocrb"), "dejavu_mono": font_path("mono")}  # the zone's typeface, the generator's
ZONES = [  # TD3 zones: the name line, then a data line (digits and letters)
    ("P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<", "L898902C36UTO7408122F1204159ZE184226B<<<<<10"),
    ("P<D<<MUSTERMANN<<ERIKA<<<<<<<<<<<<<<<<<<<<<<", "C01X00T478D<<6408125F2702283<<<<<<<<<<<<<<<4"),
    ("P<GBRQUINZE<VAN<DER<BERG<<JOZEF<XAVIER<<<<<<", "9876543214GBR9001017M3012315<<<<<<<<<<<<<<08"),
    ("PMCHNWANG<<XU<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<", "E12345678HCHN8803056F3304219KJLMNPQRSTUVWY62"),
]


def render_zone(font: str, lines: tuple[str, ...], text_px: int, blur: float) -> np.ndarray:
    """A page (RGB) with a zone's lines drawn at a fixed pitch, capitals about `text_px` high."""
    f = ImageFont.truetype(FONTS[font], int(text_px / 0.72))
    advance = f.getlength("M")
    width, height = int(advance * 44 + 8 * text_px), int(text_px * (3 + 1.8 * len(lines)))
    page = Image.new("RGB", (width, height), (246, 244, 238))
    draw = ImageDraw.Draw(page)
    for k, line in enumerate(lines):
        for i, c in enumerate(line):
            draw.text((4 * text_px + i * advance, 1.5 * text_px + k * 1.8 * text_px), c, font=f, fill=(20, 20, 20))
    if blur:
        page = page.filter(ImageFilter.GaussianBlur(blur))
    return np.asarray(page)


@pytest.mark.parametrize("font", sorted(FONTS))
@pytest.mark.parametrize("text_px,blur", [(14, 0.0), (22, 0.8), (34, 1.2)])
def test_rendered_zones_are_read_cell_by_cell(font: str, text_px: int, blur: float) -> None:
    """Rendered zones found by their shape alone: at least 99% of characters right, every name line right."""
    right = total = 0
    for zone in ZONES:
        page = render_zone(font, zone, text_px, blur)
        rows = sorted(locate_rows_by_shape(page), key=lambda r: r.cy)
        assert len(rows) == 2
        name = mrz_glyphs.read_row(page, rows[0], 44, mrz_glyphs.name_mask(44, 5))
        data = mrz_glyphs.read_row(page, rows[1], 44)
        assert name is not None and name.text == zone[0], (name, zone[0])
        assert data is not None
        right += sum(a == b for a, b in zip(name.text + data.text, "".join(zone)))
        total += 88
    assert right / total >= 0.99, right / total


def test_a_name_line_smeared_by_motion_is_also_cut_on_the_band_of_its_letters() -> None:
    """A name line is mostly fillers, whose arms fill the middle rows; smeared sideways, the letters' thinner rows
    fall below a fifth of the busiest row's ink and the tight band loses them. The bridged band spans the letters
    as on the sharp line, and a sharp line has no other band to try."""
    from pipeline.extract.ocr.mrz_reread import refine, strip

    def ink(page: np.ndarray) -> np.ndarray:
        row = refine(page, sorted(locate_rows_by_shape(page), key=lambda r: r.cy)[0], max_growth=1.4)
        return mrz_glyphs.ink_strip(strip(page, row))

    sharp = ink(render_zone("ocrb", ZONES[0], 30, 0.0))
    kernel = np.zeros((15, 15), np.float32)
    kernel[7, :] = 1 / 15
    smeared = ink(cv2.filter2D(render_zone("ocrb", ZONES[0], 30, 0.0), -1, kernel))
    (top, bottom), tight = mrz_glyphs._text_band(sharp), mrz_glyphs._text_band(smeared)
    assert mrz_glyphs._bridged_band(sharp, (top, bottom)) is None
    assert tight[1] < bottom - 2  # the tight band lost the letters' feet
    bridged = mrz_glyphs._bridged_band(smeared, tight)
    assert bridged is not None and abs(bridged[0] - top) <= 2 and abs(bridged[1] - bottom) <= 2, (top, bottom, bridged)


def test_a_strip_that_is_not_a_zone_is_not_cut_into_cells() -> None:
    """A strip whose ink cannot be n characters of a zone (a short word) gives no reading, not a guess."""
    page = Image.new("RGB", (900, 80), (250, 250, 250))
    ImageDraw.Draw(page).text((20, 20), "SPECIMEN", font=ImageFont.truetype(FONTS["ocrb"], 40), fill=(0, 0, 0))
    assert mrz_glyphs.read_strip(np.asarray(page), 44) is None


def test_the_sample_passport_name_line_is_read_as_its_truth() -> None:
    """On the generated sample passport the second reader reads the zone's name line as the truth, and the
    embedded reading's check records the two readers' agreement."""
    truth = next(x for x in json.loads((REPO / "data" / "sample_ground_truth.json").read_text())
                 if x["path"] == "passport_td3.jpg")
    pixels = np.asarray(Image.open(REPO / "data" / "sample" / "passport_td3.jpg").convert("RGB"))
    lines = backend.ocr_lines(pixels)
    assert mrz_glyphs.name_agrees(pixels, lines, truth["name"]) is True
    assert mrz_glyphs.name_agrees(pixels, lines, truth["name"] + " X") is False  # another name is no agreement
    found = mrz_glyphs.name_line(lines, truth["name"])
    assert found is not None
    boxes, width, first = found
    read = mrz_glyphs.read_row(pixels, mrz_glyphs._located_row(lines, boxes), width, mrz_glyphs.name_mask(width, 5))
    assert read is not None
    assert names(read.text[first:]) == truth["name"]


def test_evidence_of_two_readers() -> None:
    """Agreement is a class of its own, and so is disagreement, whether or not the printed zone confirms the name;
    a name the second reader was not asked about keeps the class its printed confirmation gives."""
    zone = ["mrz.number", "mrz.birth", "mrz.expiry"]
    assert zone_evidence("name", zone + [NAME_TWO_READERS_CHECK], []) == "mrz.name_two_readers"
    assert zone_evidence("name", zone, [NAME_TWO_READERS_CHECK]) == "mrz.name_two_readers/" + DISAGREES
    confirmed = zone + ["cross.name_mrz_vs_viz"]
    assert zone_evidence("name", confirmed + [NAME_TWO_READERS_CHECK], []) == "mrz.name_two_readers"
    assert zone_evidence("name", confirmed, [NAME_TWO_READERS_CHECK]) == "mrz.name_two_readers/" + DISAGREES
    assert zone_evidence("name", confirmed, []) == "mrz.name_vs_printed_passed"
    assert zone_evidence("name", zone, []) == "mrz.name_vs_printed_none"


def _extraction(checks: list[str], failures: list[str]) -> Extraction:
    return Extraction(ref="x", fields={"doc_type": "passport", "name": "ERIKSSON ANNA MARIA"}, backend="ocr",
                      model="m", field_states={"name": FieldReading("ERIKSSON ANNA MARIA", "present", 0.99)},
                      checks=checks, check_failures=failures)


def test_two_readers_disagreeing_are_never_auto_accepted_whatever_a_table_says() -> None:
    """The disagreement is capped below the auto-accept threshold even by a table that gives its class 0.999; the
    agreement class gets what the table says, and the shipped table fits it on at least 300 tuning observations."""
    classes = {"name/mrz.name_two_readers/disagrees": {"edges": [0.0], "values": [0.999], "counts": [1000]},
               "name/mrz.name_two_readers": {"edges": [0.0], "values": [0.999], "counts": [1000]}}
    generous = Calibration.from_dict({"unseen_cap": 0.9, "classes": classes})
    zone = ["mrz.number", "mrz.birth", "mrz.expiry"]
    disagree = generous.apply(_extraction(zone, [NAME_TWO_READERS_CHECK]))
    assert disagree.field_states["name"].confidence == DISAGREEMENT_CAP < 0.95
    agree = generous.apply(_extraction(zone + [NAME_TWO_READERS_CHECK], []))
    assert agree.field_states["name"].confidence == 0.999
    table = shipped()
    assert sum(table.curves["name/mrz.name_two_readers"].counts) >= 300
    assert table.apply(_extraction(zone, [NAME_TWO_READERS_CHECK])).field_states["name"].confidence == \
        DISAGREEMENT_CAP
    # a model's answer floored by an embedded reading whose two readers disagree gets no more than the cap either
    assert generous.confidence("name/" + zone_evidence("name", zone, [NAME_TWO_READERS_CHECK]), 0.99) == \
        DISAGREEMENT_CAP


def test_the_check_is_asked_where_the_printed_zone_does_not_settle_the_name() -> None:
    """Asked where the printed zone does not confirm the name, or confirms it at a raw score the shipped table
    does not auto-accept; not where the confirmation settles it, nor for names of other classes."""
    from pipeline.formats.document import DocumentReading

    def reading(checks: list[str], failures: list[str] = (), raw: float = 0.9) -> DocumentReading:
        return DocumentReading("passport", "icao_mrz", {"name": "A B"}, {"name": FieldReading("A B", "present", raw)},
                               checks, list(failures))

    confirmed = ["mrz.number", "cross.name_mrz_vs_viz"]
    assert mrz_glyphs.wanted(reading(["mrz.number"], raw=0.999))
    assert mrz_glyphs.wanted(reading(confirmed, raw=mrz_glyphs.UNSURE_CONFIRMED_NAME - 0.001))
    assert not mrz_glyphs.wanted(reading(confirmed, raw=mrz_glyphs.UNSURE_CONFIRMED_NAME))
    assert not mrz_glyphs.wanted(reading(["mrz.number"], ["cross.name_respelled_as_printed"]))
    assert not mrz_glyphs.wanted(reading(["mrz.number", "cross.name_printed_extends_mrz"]))
    assert not mrz_glyphs.wanted(reading([]))  # no zone decoded
    # the score it is asked under is where the shipped table stops auto-accepting a confirmed name on its own
    curve = shipped().curves["name/mrz.name_vs_printed_passed"]
    assert curve(mrz_glyphs.UNSURE_CONFIRMED_NAME - 0.001) < 0.95 <= curve(mrz_glyphs.UNSURE_CONFIRMED_NAME)


def test_read_page_asks_the_second_reader_where_no_printed_zone_confirms_the_name() -> None:
    """A zone alone (nothing printed beside it to confirm the name): the embedded reading records that the two
    readers agree, and the name's class is the two readers'."""
    from pipeline.trust.table import evidence_class

    page = render_zone("ocrb", ZONES[0], 30, 0.6)
    reading, _ = backend.read_page(page, date(2026, 1, 1), try_flipped=False)
    assert reading.fields["name"] == "ERIKSSON ANNA MARIA"
    assert NAME_TWO_READERS_CHECK in reading.checks
    assert evidence_class("name", reading.doc_type, reading.checks, reading.check_failures) == \
        "name/mrz.name_two_readers"


def test_a_zone_that_settles_its_page_is_not_re_read_for_its_unconfirmed_name() -> None:
    """Every field read and every check passed, nothing printed to confirm the name: the second reader checks the
    name and the zone is not re-read (that costs up to two thirds of a first pass); a zone short of that is."""
    from pipeline.extract.ocr import page_read
    from pipeline.formats.document import read_document

    first = read_document(backend.ocr_lines(render_zone("ocrb", ZONES[0], 30, 0.6)), date(2026, 1, 1))
    assert first.fields["name"] == "ERIKSSON ANNA MARIA" and page_read.zone_checked(first)
    assert "cross.name_mrz_vs_viz" not in first.checks
    assert mrz_glyphs.wanted(first) and not backend.needs_second_reading(first)
    unread = dataclasses.replace(first, states={**first.states, "expiry_date": FieldReading(None, "unreadable", 0.0)})
    assert not page_read.zone_checked(unread) and backend.needs_second_reading(unread)
    failed = dataclasses.replace(first, check_failures=["mrz.composite"])
    assert not page_read.zone_checked(failed) and backend.needs_second_reading(failed)


def test_zone_rows_are_located_from_boxes_on_one_centre_line() -> None:
    """Two zone boxes whose centres lie on the same line (one row cut in two) are one row, not a comparison of
    boxes (which have no order)."""
    from pipeline.extract.ocr.mrz_reread import locate_rows
    from pipeline.formats.lines import OcrLine

    left = OcrLine("P<UTOERIKSSON<<ANNA<MARIA", 0.9, ((10, 100), (410, 100), (410, 130), (10, 130)))
    right = OcrLine("<<<<<<<<<<<<<<<<<<<", 0.9, ((420, 100), (720, 100), (720, 130), (420, 130)))
    rows = locate_rows([left, right])
    assert len(rows) == 3 and sorted(round(r.cy) for r in rows).count(115) == 1


def test_the_name_line_is_found_by_where_the_surname_stands_not_by_counting_rows() -> None:
    """A visa's data line without fillers is no zone box, so the zone shows one row; the name line is still found
    (the surname from its sixth character: a two-line zone) and read by the second reader as the first did."""
    zone = ("V<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<", "L898902C36UTO7408122F1204159ZE184226")  # MRV-B, 2 x 36
    page = render_zone("ocrb", zone, 22, 0.8)
    lines = backend.ocr_lines(page)
    found = mrz_glyphs.name_line(lines, "ERIKSSON ANNA MARIA")
    assert found is not None and found[1:] == (36, 5)
    assert mrz_glyphs.name_agrees(page, lines, "ERIKSSON ANNA MARIA") is True


def test_a_name_line_the_first_reader_lost_is_read_where_the_zone_puts_it() -> None:
    """The first reader kept only the data line of a TD3 zone (the name stored is the printed one): the second
    reader reads the row one line pitch above it, and agrees with the printed name only if the zone holds it."""
    page = render_zone("ocrb", ZONES[0], 22, 0.8)
    lines = [x for x in backend.ocr_lines(page) if "ERIKSSON" not in x.text]
    assert mrz_glyphs.name_line(lines, "ERIKSSON ANNA MARIA") is None
    assert mrz_glyphs.lost_name_row(lines)[1:] == (44, 5)
    assert mrz_glyphs.name_agrees(page, lines, "ERIKSSON ANNA MARIA") is True
    assert mrz_glyphs.name_agrees(page, lines, "ERIKSSON ANNA MARIE") is False


@pytest.mark.parametrize("above", ["", "<" * 44], ids=["blank paper", "no document code"])
def test_no_name_line_above_a_lone_data_line_is_no_judgement(above: str) -> None:
    """Blank paper, or a row that does not read as a zone's name line (fillers only: no document code), above a
    lone data line leaves the name unjudged, neither agreement nor disagreement; a TD1 card's rows say nothing of
    where its name line is."""
    from pipeline.formats.lines import OcrLine

    page = render_zone("ocrb", (above, ZONES[0][1]), 22, 0.8)
    lines = [x for x in backend.ocr_lines(page) if any(c.isdigit() for c in x.text)]
    assert mrz_glyphs.lost_name_row(lines) is not None
    assert mrz_glyphs.name_agrees(page, lines, "ERIKSSON ANNA MARIA") is None
    td1 = [OcrLine(text, 0.9, ((10, y), (600, y), (600, y + 30), (10, y + 30)))
           for text, y in (("I<UTOD231458907<<<<<<<<<<<<<<<", 100), ("7408122F1204159UTO<<<<<<<<<<<6", 150))]
    assert mrz_glyphs.lost_name_row(td1) is None


def test_a_box_lying_across_a_two_line_zone_does_not_make_it_a_td1_card() -> None:
    """Three rows of zone boxes (one of them a stamp or a crease read as text) are not a TD1 zone when the surname
    stands where a two-line zone holds it; a TD1 name line begins with the surname."""
    from pipeline.formats.lines import OcrLine

    def box(text: str, y: int) -> OcrLine:
        return OcrLine(text, 0.9, ((10, y), (900, y), (900, y + 30), (10, y + 30)))

    two_line = [box("P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<", 100),
                box("L898902C36UTO7408122F1204159ZE184226B<<<<<10", 150), box("<<1<<X<<<<<<<<<<<<<<<<", 190)]
    assert mrz_glyphs.name_line(two_line, "ERIKSSON ANNA MARIA")[1:] == (44, 5)
    td1 = [box("I<UTOD231458907<<<<<<<<<<<<<<<", 100), box("7408122F1204159UTO<<<<<<<<<<<6", 150),
           box("ERIKSSON<<ANNA<MARIA<<<<<<<<<<", 200)]
    assert mrz_glyphs.name_line(td1, "ERIKSSON ANNA MARIA")[1:] == (30, 0)
    assert mrz_glyphs.name_line(td1, "OTHER NAME") is None
    # a short surname whose letters a TD1's number line holds by chance (LI in L1...) is still read on the third line
    chance = [box("I<CHNL12345678<<<<<<<<<<<<<<<<", 100), box("8001014M3001012CHN<<<<<<<<<<<4", 150),
              box("LI<<WEI<<<<<<<<<<<<<<<<<<<<<<<", 200)]
    boxes, width, first = mrz_glyphs.name_line(chance, "LI WEI")
    assert (width, first) == (30, 0) and boxes[0].text.startswith("LI<<WEI")


def test_a_zone_read_in_pieces_is_as_long_as_the_width_its_rows_span() -> None:
    """The first pass lost the fillers closing both lines of a 44-character visa zone (MRV-A): neither row's text
    is 40 long, but the rows span 44 characters at the pitch of their boxes."""
    from pipeline.formats.lines import OcrLine

    def box(text: str, left: float, y: int, pitch: float = 20.0) -> OcrLine:
        right = left + pitch * len(text)
        return OcrLine(text, 0.9, ((left, y), (right, y), (right, y + 30), (left, y + 30)))

    pieces = [box("V<UTOERIKSSON<<ANNA<MARIA<<<<", 100, 100), box("L898902C36UTO7408122F1204159ZE<<<", 100, 150),
              box("<<<<", 100 + 20 * 40, 150)]
    assert mrz_glyphs.name_line(pieces, "ERIKSSON ANNA MARIA")[1:] == (44, 5)
    mrv_b = [box("V<UTOERIKSSON<<ANNA<MARIA<<<<<", 100, 100), box("L898902C36UTO7408122F1204159ZE<<<<<", 100, 150)]
    assert mrz_glyphs.name_line(mrv_b, "ERIKSSON ANNA MARIA")[1:] == (36, 5)


def test_a_filler_the_recogniser_lost_or_read_as_a_letter_is_no_disagreement() -> None:
    """The first reader's name line lost the filler between surname and given names and read a closing filler as
    K; the zone decoder repairs both, and the second reader, reading the drawn line letter for letter, agrees with
    the stored name. A stored name with another letter is still a disagreement."""
    page = render_zone("ocrb", ZONES[0], 22, 0.8)
    lines = backend.ocr_lines(page)
    name_box = next(x for x in lines if "ERIKSSON" in x.text)
    damaged = dataclasses.replace(name_box, text=name_box.text.replace("ERIKSSON<<ANNA", "ERIKSSON<ANNA")[:40] + "K")
    lines = [damaged if x is name_box else x for x in lines]
    assert "ERIKSSON<ANNA" in damaged.text
    assert mrz_glyphs.name_agrees(page, lines, "ERIKSSON ANNA MARIA") is True
    assert mrz_glyphs.name_agrees(page, lines, "ERIKSSON ANNA MARIE") is False


def glyph_read(field: str, unsure: dict[int, dict[str, float]] | None = None) -> mrz_glyphs.LineRead:
    """A TD3 name line as the glyph reader would give it: sure of every cell but the `unsure` ones (position in
    the field -> symbol -> probability; the rest of the cell goes to the symbol read)."""
    text = "P<UTO" + field.ljust(39, "<")
    cells = np.zeros((len(text), len(mrz_glyphs.ALPHABET)), np.float32)
    for i, c in enumerate(text):
        cells[i, mrz_glyphs.ALPHABET.index(c)] = 1.0
    for i, others in (unsure or {}).items():
        for symbol, p in others.items():
            cells[5 + i, mrz_glyphs.ALPHABET.index(symbol)] = p
        cells[5 + i, mrz_glyphs.ALPHABET.index(text[5 + i])] = 1.0 - sum(others.values())
    return mrz_glyphs.LineRead(text, tuple(float(x) for x in cells.max(axis=1)), cells)


def test_one_look_alike_cell_the_glyph_reader_is_unsure_of_is_no_disagreement() -> None:
    # "HUGO" read "HLGO" with the U at 0.2: the stored name stands; a U at 0.01 is a letter read plainly otherwise
    at = len("HOFFMANN<<H")
    unsure = glyph_read("HOFFMANN<<HLGO<NOAH", {at: {"U": 0.2}})
    assert mrz_glyphs.plausible_but_one(unsure, 5, "HOFFMANN HUGO NOAH")
    assert not mrz_glyphs.plausible_but_one(glyph_read("HOFFMANN<<HLGO<NOAH", {at: {"U": 0.01}}), 5,
                                            "HOFFMANN HUGO NOAH")
    # two cells differing, or a letter inserted into the stored name, disagree however unsure the reader was
    two = glyph_read("HOFFMANN<<HLGC<NOAH", {at: {"U": 0.3}, at + 2: {"O": 0.3}})
    assert not mrz_glyphs.plausible_but_one(two, 5, "HOFFMANN HUGO NOAH")
    assert not mrz_glyphs.plausible_but_one(glyph_read("KIM<<MIA"), 5, "KIM MIIA")
    # the stored name has no `<<`: it is laid out with the split into surname and given names that fits best
    assert mrz_glyphs.plausible_but_one(glyph_read("VAN<DER<BERG<<JQZEF", {15: {"O": 0.1}}), 5, "VAN DER BERG JOZEF")
