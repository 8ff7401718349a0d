"""PRC Foreign Permanent Resident ID Card (外国人永久居留身份证, 2017 and 2023 models): recognised by its
title, read by label; the card number carries its own check character (`cn_permanent_residence`).

Registered before the resident ID card: its title also says 中华人民共和国.
"""

from __future__ import annotations

import re

from pipeline.fields import cn_permanent_residence
from pipeline.fields.formats.registry import FormatDefaults, NumberCheck
from pipeline.fields.lines import line_score
from pipeline.fields.page import CROSS_DISAGREES, UNCHECKED_NAME, Builder, DocumentType, Page

CHECK = NumberCheck("cn_pr.checksum", cn_permanent_residence.is_valid_number,
                    "check character or embedded birth date is wrong")


class PermanentResidenceFormat(FormatDefaults):
    name = "cn_permanent_residence"
    doc_types = ("cn_permanent_residence",)
    issuer = "CHN"  # 外国人永久居留身份证: issued by the PRC (the holder's nationality is another field)
    number_shape = re.compile(r"[A-Z]{3}\d{12}|9\d{16}[\dX]")  # the 2017 and the 2023 model
    number_checks = {"cn_permanent_residence": CHECK}
    disagreements = {"cn_pr.birth_matches_printed": "id_number"}  # the printed birth date and the number's

    def find(self, page: Page) -> Page | None:
        return page if cn_permanent_residence.is_card(page.texts) else None

    def read(self, found: Page, page: Page, b: Builder) -> DocumentType:
        """Checksum-valid number, labelled name, validity end."""
        lines = page.lines
        card = cn_permanent_residence.read_card(page.texts, today=page.today)
        b.checks += card.checks
        b.failures += card.check_failures
        if card.number is not None:
            penalty = CROSS_DISAGREES if card.check_failures else 1.0
            b.present("id_number", card.number, line_score(lines, card.number) * penalty)
        if card.name is not None:
            b.present("name", card.name, line_score(lines, card.name.split()[0]) * UNCHECKED_NAME)
        if card.valid_until is not None:
            until = card.valid_until if isinstance(card.valid_until, str) else card.valid_until.isoformat()
            b.present("expiry_date", until, line_score(lines, until.replace("-", ".")))
        return "cn_permanent_residence"


FORMAT = PermanentResidenceFormat()
