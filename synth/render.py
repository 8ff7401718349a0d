"""Pillow renderers for synthetic identity documents.

Every renderer returns a :class:`Rendered`: the upright RGB image, the ground-truth fields the page shows
(null for what it does not show), the MRZ lines drawn (if any) and every text string drawn, so tests can
check that the ground truth is really on the page. Rendering is a pure function of its arguments.

Sizes (px): CN ID card 856x540 (CR80), TD1 856x540, TD2 1000x700, TD3 passport data page 1250x880,
MRV-A visa 1200x800, both CN sides on one page 1700x2400.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from synth.identities import CNPerson, MRZPerson, printed_date

# --------------------------------------------------------------------------------------------------------
# Fonts
# --------------------------------------------------------------------------------------------------------

_FONT_DIRS = ("/usr/share/fonts/truetype", "/usr/share/fonts", "/usr/local/share/fonts")
# role -> (file names tried in order, Debian package that provides them)
FONTS: dict[str, tuple[tuple[str, ...], str]] = {
    "cjk": (("wqy/wqy-zenhei.ttc", "wqy-zenhei/wqy-zenhei.ttc", "wqy-zenhei.ttc"), "fonts-wqy-zenhei"),
    "sans": (("dejavu/DejaVuSans.ttf", "DejaVuSans.ttf"), "fonts-dejavu-core"),
    "sans_bold": (("dejavu/DejaVuSans-Bold.ttf", "DejaVuSans-Bold.ttf"), "fonts-dejavu-core"),
    "mono": (("dejavu/DejaVuSansMono.ttf", "DejaVuSansMono.ttf"), "fonts-dejavu-core"),
    # the machine-readable zone's own typeface: what the zone glyph reader is trained and tested on
    "ocrb": (("opentype/ocr-b/OCRB.otf", "ocr-b/OCRB.otf", "OCRB.otf"), "fonts-ocr-b"),
}


class FontNotFoundError(RuntimeError):
    pass


@functools.cache
def font_path(role: str) -> str:
    """Absolute path of the font for ``role``; ``SYNTH_FONT_DIR`` (os.pathsep-separated) is searched first."""
    names, package = FONTS[role]
    dirs = [d for d in os.environ.get("SYNTH_FONT_DIR", "").split(os.pathsep) if d] + list(_FONT_DIRS)
    for d in dirs:
        for n in names:
            p = Path(d) / n
            if p.is_file():
                return str(p)
    raise FontNotFoundError(
        f"font for {role!r} not found (looked for {', '.join(names)} under {', '.join(dirs)}); "
        f"install the Debian package {package} (apt-get install {package}) or set SYNTH_FONT_DIR")


@functools.cache
def font(role: str, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(font_path(role), size)


# --------------------------------------------------------------------------------------------------------
# Result type and drawing helpers
# --------------------------------------------------------------------------------------------------------


@dataclass
class Rendered:
    image: Image.Image
    doc_type: str  # cn_id | passport | id_card | visa
    name: str | None
    id_number: str | None
    expiry_date: str | None  # YYYY-MM-DD | "long-term" | None
    orientation: str  # of the upright page: landscape | portrait
    mrz: tuple[str, ...] = ()
    texts: list[str] = field(default_factory=list)
    kind: str = ""  # renderer name, e.g. cn_front
    mrz_boxes: tuple[tuple[int, int, int, int], ...] = ()  # per MRZ line (left, top, right, bottom), in px

    def truth(self) -> dict:
        return {"doc_type": self.doc_type, "name": self.name, "id_number": self.id_number,
                "expiry_date": self.expiry_date, "orientation": self.orientation, "issuer": self.issuer}

    @property
    def issuer(self) -> str | None:
        """The issuing state the page states: the zone's (ISO 3166-1 alpha-3; Germany's `D` as DEU), the PRC for
        its cards, None for a page without either."""
        if self.doc_type in ("cn_id", "cn_permanent_residence"):
            return "CHN"
        code = self.mrz[0][2:5].replace("<", "") if self.mrz else ""
        return ("DEU" if code == "D" else code) or None


class _Canvas:
    def __init__(self, img: Image.Image):
        self.img = img
        self.draw = ImageDraw.Draw(img)
        self.texts: list[str] = []
        self.mrz_boxes: list[tuple[int, int, int, int]] = []

    def text(self, xy, s: str, role: str, size: int, fill=(20, 20, 20), spacing: int = 0) -> int:
        """Draw ``s``; ``spacing`` adds px between characters. Returns the x after the text."""
        f = font(role, size)
        x, y = xy
        if spacing:
            for ch in s:
                self.draw.text((x, y), ch, font=f, fill=fill)
                x += f.getlength(ch) + spacing
        else:
            self.draw.text((x, y), s, font=f, fill=fill)
            x += f.getlength(s)
        self.texts.append(s)
        return int(round(x))

    def mrz(self, lines: tuple[str, ...], y0: int, size: int, pitch: int, band=(252, 252, 250)) -> None:
        f = font("mono", size)
        w = max(f.getlength(line) for line in lines)
        x0 = int((self.img.width - w) / 2)
        bottom = min(self.img.height - 8, y0 + pitch * len(lines) + 6)
        self.draw.rectangle((8, y0 - 18, self.img.width - 9, bottom), fill=band)
        for i, line in enumerate(lines):
            self.draw.text((x0, y0 + i * pitch), line, font=f, fill=(10, 10, 10))
            self.texts.append(line)
            left, top, right, bottom = f.getbbox(line)
            self.mrz_boxes.append((x0 + left, y0 + i * pitch + top, x0 + right, y0 + i * pitch + bottom))


@functools.cache
def _pattern(w: int, h: int, base: tuple[int, int, int], tint: tuple[int, int, int], variant: int) -> bytes:
    """Light security-print-like background: soft gradient + faint guilloche lines (cached, deterministic)."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    ph = variant * 0.7
    wave = np.sin((x * 0.55 + y) / 7.0 + 2.6 * np.sin(x / 61.0 + ph) + 1.3 * np.sin(y / 37.0))
    lines = np.clip(1.0 - np.abs(wave) / 0.22, 0, 1)
    wave2 = np.sin((x - y * 0.4) / 11.0 + 2.0 * np.sin(y / 47.0 + ph))
    lines2 = np.clip(1.0 - np.abs(wave2) / 0.15, 0, 1)
    grad = (x / w * 0.5 + y / h * 0.5)[..., None]
    b = np.array(base, np.float32)
    t = np.array(tint, np.float32)
    img = b * (1 - 0.25 * grad) + t * (0.25 * grad)
    a = (0.20 * lines + 0.12 * lines2)[..., None]
    img = img * (1 - a) + t * a
    return np.clip(img, 0, 255).astype(np.uint8).tobytes()


def _background(w: int, h: int, base, tint, variant: int = 0) -> Image.Image:
    return Image.frombytes("RGB", (w, h), _pattern(w, h, tuple(base), tuple(tint), variant))


def _photo_box(c: _Canvas, box: tuple[int, int, int, int]) -> None:
    x0, y0, x1, y1 = box
    d = c.draw
    d.rectangle(box, fill=(196, 198, 200), outline=(150, 150, 150), width=2)
    cx, w, h = (x0 + x1) // 2, x1 - x0, y1 - y0
    d.ellipse((cx - w * 0.22, y0 + h * 0.16, cx + w * 0.22, y0 + h * 0.52), fill=(160, 162, 165))
    d.pieslice((cx - w * 0.42, y0 + h * 0.58, cx + w * 0.42, y0 + h * 1.30), 180, 360, fill=(160, 162, 165))


def _emblem(c: _Canvas, cx: int, cy: int, r: int) -> None:
    """Placeholder for the national emblem: red disc, gold ring, five gold stars (not the real emblem)."""
    import math

    d = c.draw
    d.ellipse((cx - r, cy - r, cx + r, cy + r), fill=(200, 40, 40), outline=(220, 180, 60), width=6)

    def star(sx, sy, sr):
        pts = []
        for k in range(10):
            ang = -math.pi / 2 + k * math.pi / 5
            rr = sr if k % 2 == 0 else sr * 0.4
            pts.append((sx + rr * math.cos(ang), sy + rr * math.sin(ang)))
        d.polygon(pts, fill=(245, 205, 70))

    star(cx, cy - r * 0.18, r * 0.38)
    for k in range(4):
        ang = math.pi * (0.95 + k * 0.27)
        star(cx + r * 0.62 * math.cos(ang) + r * 0.35, cy + r * 0.62 * math.sin(ang) + r * 0.05, r * 0.12)


# --------------------------------------------------------------------------------------------------------
# PRC 居民身份证
# --------------------------------------------------------------------------------------------------------

CARD_W, CARD_H = 856, 540
_LABEL = (44, 92, 150)


def _wrap(s: str, n: int) -> list[str]:
    return [s[i:i + n] for i in range(0, len(s), n)] or [""]


def cn_front(p: CNPerson, variant: int = 0) -> Rendered:
    """人像面: 姓名 性别 民族 出生 住址 公民身份号码 and a photo placeholder."""
    img = _background(CARD_W, CARD_H, (247, 245, 238), (186, 206, 226), variant)
    c = _Canvas(img)
    c.draw.rounded_rectangle((0, 0, CARD_W - 1, CARD_H - 1), radius=28, outline=(205, 210, 215), width=2)
    lx, vx = 56, 150
    c.text((lx, 58), "姓名", "cjk", 26, _LABEL)
    c.text((vx, 52), p.name, "cjk", 36)
    c.text((lx, 124), "性别", "cjk", 26, _LABEL)
    c.text((vx, 120), p.sex_cn, "cjk", 30)
    c.text((260, 124), "民族", "cjk", 26, _LABEL)
    c.text((340, 120), p.ethnicity, "cjk", 30)
    c.text((lx, 188), "出生", "cjk", 26, _LABEL)
    c.text((vx, 184), p.birth_printed, "cjk", 30)
    c.text((lx, 252), "住址", "cjk", 26, _LABEL)
    for i, line in enumerate(_wrap(p.address, 12)[:3]):
        c.text((vx, 248 + i * 42), line, "cjk", 30)
    c.text((lx, 452), "公民身份号码", "cjk", 26, _LABEL)
    c.text((260, 444), p.id_number, "sans", 36, (15, 15, 15), spacing=3)
    _photo_box(c, (600, 60, 800, 320))
    return Rendered(img, "cn_id", p.name, p.id_number, None, "landscape", texts=c.texts, kind="cn_front")


def cn_back(p: CNPerson, sep: str = "-", variant: int = 0) -> Rendered:
    """国徽面: 中华人民共和国 居民身份证, 签发机关, 有效期限 (``sep`` between the dates: '-', '—' or '至')."""
    img = _background(CARD_W, CARD_H, (246, 244, 236), (214, 196, 170), variant + 1)
    c = _Canvas(img)
    c.draw.rounded_rectangle((0, 0, CARD_W - 1, CARD_H - 1), radius=28, outline=(205, 210, 215), width=2)
    _emblem(c, 130, 130, 78)
    c.text((262, 72), "中华人民共和国", "cjk", 46, (30, 30, 30), spacing=8)
    c.text((250, 160), "居民身份证", "cjk", 72, (30, 30, 30), spacing=16)
    c.text((120, 380), "签发机关", "cjk", 26, _LABEL)
    c.text((262, 374), p.issuer, "cjk", 30)
    c.text((120, 444), "有效期限", "cjk", 26, _LABEL)
    c.text((262, 440), p.validity_printed(sep), "cjk", 30)
    return Rendered(img, "cn_id", None, None, p.expiry_iso, "landscape", texts=c.texts, kind="cn_back")


PAGE_W, PAGE_H = 1700, 2400


def cn_both_sides(p: CNPerson, sep: str = "-", variant: int = 0) -> Rendered:
    """Front above back on a white A4-ish page (a photocopy of both sides)."""
    front, back = cn_front(p, variant), cn_back(p, sep, variant)
    page = Image.new("RGB", (PAGE_W, PAGE_H), (255, 255, 255))
    x = (PAGE_W - CARD_W) // 2
    page.paste(front.image, (x, 320))
    page.paste(back.image, (x, 320 + CARD_H + 160))
    return Rendered(page, "cn_id", p.name, p.id_number, p.expiry_iso, "portrait",
                    texts=front.texts + back.texts, kind="cn_both")


# --------------------------------------------------------------------------------------------------------
# ICAO machine-readable documents
# --------------------------------------------------------------------------------------------------------

_GREY = (90, 90, 100)


def _field(c: _Canvas, x: int, y: int, label: str, value: str, vsize: int = 30, lsize: int = 18) -> None:
    c.text((x, y), label, "sans", lsize, _GREY)
    c.text((x, y + lsize + 6), value, "sans_bold", vsize, (15, 15, 15))


def passport_td3(p: MRZPerson, variant: int = 0) -> Rendered:
    """ICAO TD3 passport data page (125x88 mm) with a 2x44 MRZ."""
    w, h = 1250, 880
    img = _background(w, h, (240, 244, 246), (178, 200, 215), variant + 2)
    c = _Canvas(img)
    c.text((60, 28), "PASSPORT", "sans_bold", 34, (40, 60, 110))
    c.text((300, 36), "PASSEPORT", "sans", 24, (40, 60, 110))
    c.text((640, 30), p.state_name, "sans_bold", 32, (40, 60, 110))
    _photo_box(c, (60, 120, 340, 480))
    x1, x2, x3 = 390, 640, 900
    _field(c, x1, 110, "Type / Type", "P")
    _field(c, x2, 110, "Code / Code", p.issuing_state)
    _field(c, x3, 110, "Passport No. / No. du passeport", p.doc_number)
    _field(c, x1, 180, "Surname / Nom", p.surname)
    _field(c, x1, 250, "Given names / Prénoms", p.given_names)
    _field(c, x1, 320, "Nationality / Nationalité", p.nationality)
    _field(c, x1, 390, "Date of birth / Date de naissance", printed_date(p.birth))
    _field(c, x2 + 90, 390, "Sex / Sexe", p.sex)
    _field(c, x3, 390, "Place of birth / Lieu de naissance", p.place_of_birth or "-")
    _field(c, x1, 460, "Date of issue / Date de délivrance", printed_date(p.issued))
    _field(c, x3 - 60, 460, "Authority / Autorité", "PASSPORT OFFICE")
    _field(c, x1, 530, "Date of expiry / Date d'expiration", printed_date(p.expiry))
    c.draw.line((900, 600, 1180, 600), fill=(60, 60, 90), width=2)
    mrz = p.td3()
    c.mrz(mrz, 700, 40, 70)
    return Rendered(img, "passport", p.full_name, p.doc_number, p.expiry.isoformat(), "landscape",
                    mrz=mrz, mrz_boxes=tuple(c.mrz_boxes), texts=c.texts, kind="passport_td3")


def id_card_td1(p: MRZPerson, variant: int = 0, marks: bool = False) -> Rendered:
    """ICAO TD1 ID card (CR80) with visual zone and a 3x30 MRZ on the same side. `marks`: the layout prints
    field numbers before the name values and quotation marks round the surname (`1. „SURNAME“`, `2. GIVEN`),
    as some cards and licences do."""
    img = _background(CARD_W, CARD_H, (242, 246, 240), (190, 212, 190), variant + 3)
    c = _Canvas(img)
    c.draw.rounded_rectangle((0, 0, CARD_W - 1, CARD_H - 1), radius=28, outline=(200, 205, 200), width=2)
    c.text((30, 14), "IDENTITY CARD", "sans_bold", 26, (40, 90, 60))
    c.text((520, 16), p.state_name, "sans_bold", 24, (40, 90, 60))
    _photo_box(c, (30, 64, 210, 300))
    x1, x2 = 240, 560
    _field(c, x1, 56, "Surname", f"1. „{p.surname}“" if marks else p.surname, 26, 15)
    _field(c, x1, 112, "Given names", f"2. {p.given_names}" if marks else p.given_names, 26, 15)
    _field(c, x1, 168, "Sex", p.sex, 26, 15)
    _field(c, x1 + 110, 168, "Nationality", p.nationality, 26, 15)
    _field(c, x2, 168, "Date of birth", printed_date(p.birth), 26, 15)
    _field(c, x1, 224, "Document No.", p.doc_number, 26, 15)
    _field(c, x2, 224, "Date of expiry", printed_date(p.expiry), 26, 15)
    mrz = p.td1()
    c.mrz(mrz, 372, 38, 54)
    return Rendered(img, "id_card", p.full_name, p.doc_number, p.expiry.isoformat(), "landscape",
                    mrz=mrz, mrz_boxes=tuple(c.mrz_boxes), texts=c.texts, kind="id_card_td1")


def id_card_td2(p: MRZPerson, variant: int = 0) -> Rendered:
    """ICAO TD2 card (105x74 mm) with a 2x36 MRZ."""
    w, h = 1000, 700
    img = _background(w, h, (244, 242, 248), (200, 190, 220), variant + 4)
    c = _Canvas(img)
    c.draw.rounded_rectangle((0, 0, w - 1, h - 1), radius=30, outline=(200, 200, 210), width=2)
    c.text((40, 24), "IDENTITY CARD", "sans_bold", 30, (70, 50, 110))
    c.text((600, 28), p.state_name, "sans_bold", 26, (70, 50, 110))
    _photo_box(c, (40, 90, 270, 390))
    x1, x2 = 310, 640
    _field(c, x1, 86, "Surname", p.surname, 28)
    _field(c, x1, 154, "Given names", p.given_names, 28)
    _field(c, x1, 222, "Sex", p.sex, 28)
    _field(c, x1 + 110, 222, "Nationality", p.nationality, 28)
    _field(c, x2, 222, "Date of birth", printed_date(p.birth), 28)
    _field(c, x1, 290, "Document No.", p.doc_number, 28)
    _field(c, x2, 290, "Date of expiry", printed_date(p.expiry), 28)
    _field(c, x1, 358, "Date of issue", printed_date(p.issued), 28)
    mrz = p.td2()
    c.mrz(mrz, 540, 40, 66)
    return Rendered(img, "id_card", p.full_name, p.doc_number, p.expiry.isoformat(), "landscape",
                    mrz=mrz, mrz_boxes=tuple(c.mrz_boxes), texts=c.texts, kind="id_card_td2")


def visa_mrva(p: MRZPerson, variant: int = 0) -> Rendered:
    """MRV-A visa sticker (120x80 mm) with a 2x44 MRZ starting 'V'."""
    w, h = 1200, 800
    img = _background(w, h, (248, 243, 236), (226, 196, 170), variant + 5)
    c = _Canvas(img)
    c.text((50, 26), "VISA", "sans_bold", 40, (120, 60, 40))
    c.text((260, 34), p.state_name, "sans_bold", 30, (120, 60, 40))
    _photo_box(c, (50, 110, 290, 420))
    x1, x2, x3 = 330, 600, 860
    _field(c, x1, 100, "Valid from", printed_date(p.issued), 28)
    _field(c, x2, 100, "Until", printed_date(p.expiry), 28)
    _field(c, x3, 100, "Type", "C", 28)
    _field(c, x1, 170, "Number of entries", "MULT", 28)
    _field(c, x2, 170, "Duration of stay", "90 DAYS", 28)
    _field(c, x1, 240, "Surname", p.surname, 28)
    _field(c, x1, 310, "Given names", p.given_names, 28)
    _field(c, x1, 380, "Visa No.", p.doc_number, 28)
    _field(c, x2, 380, "Nationality", p.nationality, 28)
    _field(c, x3, 380, "Sex", p.sex, 28)
    _field(c, x1, 450, "Date of birth", printed_date(p.birth), 28)
    mrz = p.mrva()
    c.mrz(mrz, 630, 40, 70)
    return Rendered(img, "visa", p.full_name, p.doc_number, p.expiry.isoformat(), "landscape",
                    mrz=mrz, mrz_boxes=tuple(c.mrz_boxes), texts=c.texts, kind="visa_mrva")
