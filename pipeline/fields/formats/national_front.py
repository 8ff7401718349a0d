"""The front of a national identity card whose zone is on the back (`fields.national_front`: FR 2021, DE,
NL, IT, ES): recognised by its issuer's title words and at least one name label, read by label (surname and
given names together, the number in its issuer's shape, the expiry a real date). No check vouches for these
values: they stay at heuristic confidence (evidence class `printed`), below the auto-accept threshold.

Registered before `printed`, which would read the same page without the issuer's number shape.
"""

from __future__ import annotations

from pipeline.fields import national_front
from pipeline.fields.dates import parse_printed_dates
from pipeline.fields.formats.registry import FormatDefaults
from pipeline.fields.national_front import Issuer
from pipeline.fields.page import HEURISTIC, Builder, DocumentType, Page
from pipeline.fields.printed_zone import printed_name


class NationalFrontFormat(FormatDefaults):
    name = "national_front"
    doc_types = ("id_card",)
    number_shape = national_front.NUMBER_SHAPE
    may_carry_mrz = False  # the zone is on the back: an MRZ re-read of a front finds nothing to read

    def find(self, page: Page) -> Issuer | None:
        """The issuer, when the page prints its title and labels a surname or given names (a back, which
        prints the title but no name label, is left to the other formats)."""
        if not {"surname", "given"} & page.printed.values.keys():
            return None
        return national_front.issuer_of(page.texts)

    def read(self, found: Issuer, page: Page, b: Builder) -> DocumentType:
        b.issuer = found.code  # the country whose title words the front prints
        self._name(page, b)
        self._number(found, page, b)
        self._expiry(page, b)
        return "id_card"

    @staticmethod
    def _name(page: Page, b: Builder) -> None:
        """Surname and given names, both read (half a name is no name: `printed_name`)."""
        name = printed_name(page.printed)
        if name is None:
            return b.unreadable("name")
        b.present("name", " ".join(name[0].split()), name[1] * HEURISTIC)

    @staticmethod
    def _number(issuer: Issuer, page: Page, b: Builder) -> None:
        """The labelled number, or where the issuer prints it without a label the one box of its shape; a
        value of another shape is unreadable (`number.shape`), never stored."""
        labelled = page.printed.values.get("number")
        number = labelled if labelled is not None or not issuer.unlabelled_number \
            else national_front.number_in_boxes(issuer, page.lines)
        if number is None:
            return b.unreadable("id_number")
        value = issuer.normalised(number[0])
        if not issuer.number.fullmatch(value):
            b.failures.append("number.shape")
            return b.unreadable("id_number")
        b.present("id_number", value, number[1] * HEURISTIC)

    @staticmethod
    def _expiry(page: Page, b: Builder) -> None:
        """The first real date in the expiry label's value; unreadable without one."""
        label = page.printed.values.get("expiry")
        dates = parse_printed_dates(label[0], today=page.today) if label else []
        if not dates:
            return b.unreadable("expiry_date")
        b.present("expiry_date", dates[0].isoformat(), label[1] * HEURISTIC)


FORMAT = NationalFrontFormat()
