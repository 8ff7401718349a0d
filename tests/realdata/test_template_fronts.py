"""Cards made on the real MIDV-2020 templates (`synth.render_template`), read end to end by the real OCR models."""

from __future__ import annotations

import random
from datetime import date

import numpy as np

from pipeline.extract.ocr.backend import read_page
from pipeline.ops.evaluation import normalise

TODAY = date(2026, 12, 4)


def test_an_albanian_card_made_on_the_real_template_is_read_as_its_issuers_front(realdata_dir, monkeypatch) -> None:
    """`synth.render_template`: the MIDV-2020 template with another mock holder's values; the reader finds the
    issuer (ALB) and reads the new values, not the template's own."""
    from synth.render_template import _OWN, _documents, alb_card

    monkeypatch.setenv("IDFLOW_REALDATA", str(realdata_dir))
    rendered = alb_card(random.Random("integration:alb_template"))
    own_numbers = {_documents()[name]["number"][0] for name in _OWN}
    assert rendered.id_number not in own_numbers
    reading, _ = read_page(np.asarray(rendered.image.convert("RGB")), TODAY, try_flipped=False)
    assert (reading.format, reading.issuer) == ("national_front", "ALB")
    assert normalise("name", reading.fields["name"]) == normalise("name", rendered.name)
    assert (reading.fields["id_number"], reading.fields["expiry_date"]) == (rendered.id_number, rendered.expiry_date)
