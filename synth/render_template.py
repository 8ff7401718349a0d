"""Cards made on real templates: the MIDV-2020 Albanian identity card (two template images and the annotation
of all 100 of its mock documents, in the real specimens' `midv2020_templates_via_sidtd`: `SYNTH_TEMPLATE_DIR`, else
under `IDFLOW_REALDATA`, else `../shared/realdata` beside the checkout).

Each value the annotation boxes is wiped from the template (its dark strokes inpainted from the guilloche around
them) and another mock holder's value is written in its place, in the template's weight and height; the capture
conditions of the eval set then degrade the card as a phone or a scanner would. What a reader meets is the
issuer's own print, background and layout, with values it has not seen.

The two documents whose template images these are (annotations 00 and 01) never lend their values, so a page made
here never shows a real specimen's holder. Tuning material only: the templates are third-party files that stay
outside the repository and are read where they lie.
"""

from __future__ import annotations

import functools
import json
import os
import random
from pathlib import Path

import cv2
import numpy as np
from PIL import Image, ImageDraw

from synth.render import Rendered, font

TEMPLATE_DIR_ENV = "SYNTH_TEMPLATE_DIR"
_FOLDER = "midv2020_templates_via_sidtd"
# annotated fields rewritten with another holder's values; the rest (photo, signature, labels) stays as printed
_REWRITTEN = ("surname", "name", "number", "birth_date", "birth_place", "issue_date", "expiry_date", "gender",
              "id_number", "authority")
_BOLD = ("surname", "expiry_date", "id_number")
_INK = (28, 28, 32)
_OWN = ("00.jpg", "01.jpg")  # the template images' own documents: their values are never reused


def template_dir() -> Path:
    realdata = Path(os.environ.get("IDFLOW_REALDATA") or Path(__file__).resolve().parents[2] / "shared" / "realdata")
    folder = Path(os.environ.get(TEMPLATE_DIR_ENV) or realdata / _FOLDER)
    if not (folder / "midv2020_via_annotations" / "alb_id.json").is_file():
        raise FileNotFoundError(f"no MIDV-2020 templates in {folder} (set {TEMPLATE_DIR_ENV} to the folder "
                                "holding images/alb00.jpg and midv2020_via_annotations/alb_id.json)")
    return folder


@functools.cache
def _documents() -> dict[str, dict[str, tuple[str, tuple[int, int, int, int]]]]:
    """Annotation file name -> field -> (value, box (x, y, w, h)), for the 100 mock Albanian cards."""
    meta = json.loads((template_dir() / "midv2020_via_annotations" / "alb_id.json").read_text())["_via_img_metadata"]
    docs = {}
    for entry in meta.values():
        fields = {}
        for region in entry["regions"]:
            shape = region["shape_attributes"]
            fields[region["region_attributes"]["field_name"]] = (
                region["region_attributes"]["value"], (shape["x"], shape["y"], shape["width"], shape["height"]))
        docs[entry["filename"]] = fields
    return docs


@functools.cache
def _wiped(image_name: str) -> np.ndarray:
    """The template image (RGB) with every rewritten field's strokes inpainted away."""
    own = _documents()[image_name]
    with Image.open(template_dir() / "images" / f"alb{image_name[:2]}.jpg") as im:
        rgb = np.asarray(im.convert("RGB")).copy()
    gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    mask = np.zeros(gray.shape, np.uint8)
    for field in _REWRITTEN:
        x, y, w, h = own[field][1]
        x, y, w, h = x - 10, y - 6, w + 40, h + 22  # the boxes hug the strokes: a margin takes edges and descenders
        box = gray[y:y + h, x:x + w]
        ink = (box < np.median(box) * 0.8).astype(np.uint8) * 255
        mask[y:y + h, x:x + w] = cv2.dilate(ink, np.ones((7, 7), np.uint8))
    return cv2.inpaint(rgb, mask, 4, cv2.INPAINT_TELEA)


def _fit(text: str, role: str, height: int, width: int):
    """The largest font of `role` whose capitals fill about `height` px and whose text fits in 1.6 `width`."""
    size = max(8, int(height * 1.05))
    f = font(role, size)
    while size > 8 and f.getlength(text) > width * 1.6:
        size -= 1
        f = font(role, size)
    return f


def alb_card(rng: random.Random) -> Rendered:
    """A mock Albanian identity card front: one of the two template images carrying another mock holder's
    values (one of the 98 others annotated), at a width between a phone's capture and the template's scan."""
    docs = _documents()
    image_name = rng.choice(_OWN)
    holder = docs[rng.choice(sorted(set(docs) - set(_OWN)))]
    img = Image.fromarray(_wiped(image_name))
    draw = ImageDraw.Draw(img)
    own = docs[image_name]
    for field in _REWRITTEN:
        value = holder[field][0]
        x, y, w, h = own[field][1]
        f = _fit(value, "sans_bold" if field in _BOLD else "sans", h, w)
        top = f.getbbox(value)[1]
        draw.text((x, y + (h - f.size) // 2 - top // 2), value, font=f, fill=_INK)
    width = rng.randint(900, 2167)
    img = img.resize((width, round(img.height * width / img.width)), Image.LANCZOS)
    day, month, year = holder["expiry_date"][0].split("-")
    name = f"{holder['surname'][0]} {holder['name'][0]}"
    texts = [holder[f][0] for f in _REWRITTEN]
    return Rendered(img, "id_card", name, holder["number"][0], f"{year}-{month}-{day}", "landscape", texts=texts,
                    kind="alb_template")
