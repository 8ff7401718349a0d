"""A stored-record stand-in for the tests of what is written around the reading (store, sessions, shards): a
passport record whose document key is `<i as 64 digits>:0`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.datamodel import DocumentRef, Extraction, FieldReading, PreparedImage, Record


def passport_record(i: int, *, expiry: str = "2031-01-14") -> Record:
    ref = DocumentRef(path=Path(f"{i}.png"), rel_path=f"{i}.png", sha256=f"{i:064d}")
    prepared = PreparedImage(ref=ref, pixels=np.zeros((32, 64, 3), np.uint8), original_size=(640, 320),
                             sent_size=(64, 32), rotation_applied=0, skew_corrected=0.0,
                             orientation="landscape", visual_tokens=2)
    extraction = Extraction(ref=ref, fields={"doc_type": "passport", "name": "MARTIN SARAH", "id_number": "ZE000509",
                                             "expiry_date": expiry, "orientation": "landscape"},
                            backend="ocr", model="m", field_states={"name": FieldReading("MARTIN SARAH", "present", 0.9)})
    return Record(extraction=extraction, prepared=prepared, checks=["schema"], expiry_date=expiry,
                  expiry_long_term=False)
