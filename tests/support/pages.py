"""Synthetic prepared pages for backend tests: distinct pixels per page, so each has its own image hash."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.datamodel import DocumentRef, PreparedImage


def make_page(i: int, size: tuple[int, int] = (320, 192)) -> PreparedImage:
    width, height = size
    pixels = np.random.default_rng(i).integers(0, 255, size=(height, width, 3), dtype=np.uint8)
    ref = DocumentRef(Path(f"/in/doc{i}.jpg"), f"doc{i}.jpg", f"{i:064x}")
    return PreparedImage(ref=ref, pixels=pixels, original_size=size, sent_size=size, rotation_applied=0,
                         skew_corrected=0.0, orientation="landscape", visual_tokens=(width // 32) * (height // 32))
