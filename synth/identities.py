"""Fake people and their document data: PRC 居民身份证 numbers and ICAO 9303 MRZ lines.

The check-digit math is deliberately re-implemented here (not imported from ``pipeline``) so that the
pipeline's parsers are tested against an independent implementation.

Nothing here describes a real person: names come from small fixed pools of very common names, ID numbers
get a real region code and birth date but a random sequence number, and passports default to the ICAO
specimen state ``UTO`` (Utopia) or a pool of states with random document numbers.
"""

from __future__ import annotations

import datetime as dt
import random
import unicodedata
from dataclasses import dataclass, field

# --------------------------------------------------------------------------------------------------------
# PRC resident ID number (GB 11643, ISO 7064 MOD 11-2)
# --------------------------------------------------------------------------------------------------------

_CN_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_CN_CHECK_CHARS = "10X98765432"


def cn_check_char(first17: str) -> str:
    """MOD 11-2 check character for the first 17 digits of a 公民身份号码."""
    if len(first17) != 17 or not first17.isdigit():
        raise ValueError(f"need 17 digits, got {first17!r}")
    total = sum(int(d) * w for d, w in zip(first17, _CN_WEIGHTS))
    return _CN_CHECK_CHARS[total % 11]


def make_cn_id_number(region: str, birth: dt.date, sequence: int, sex: str) -> str:
    """18-char number: region(6) + YYYYMMDD + sequence(3, parity = sex) + check char.

    ``sequence`` is forced to the right parity: odd for male ("M"), even for female ("F").
    """
    if len(region) != 6 or not region.isdigit():
        raise ValueError(f"bad region code {region!r}")
    seq = sequence % 1000
    want_odd = sex == "M"
    if (seq % 2 == 1) != want_odd:
        seq = seq + 1 if seq < 999 else seq - 1
    if seq == 0:  # 000 is not used
        seq = 2
    body = f"{region}{birth:%Y%m%d}{seq:03d}"
    return body + cn_check_char(body)


# Real county-level region codes (GB/T 2260) with the address prefix and the issuing 公安分局.
CN_REGIONS: tuple[tuple[str, str, str], ...] = (
    ("110101", "北京市东城区", "北京市公安局东城分局"),
    ("110105", "北京市朝阳区", "北京市公安局朝阳分局"),
    ("310104", "上海市徐汇区", "上海市公安局徐汇分局"),
    ("440106", "广东省广州市天河区", "广州市公安局天河分局"),
    ("330106", "浙江省杭州市西湖区", "杭州市公安局西湖分局"),
    ("510107", "四川省成都市武侯区", "成都市公安局武侯区分局"),
    ("420106", "湖北省武汉市武昌区", "武汉市公安局武昌分局"),
    ("320102", "江苏省南京市玄武区", "南京市公安局玄武分局"),
    ("610113", "陕西省西安市雁塔区", "西安市公安局雁塔分局"),
    ("370102", "山东省济南市历下区", "济南市公安局历下分局"),
    ("500103", "重庆市渝中区", "重庆市公安局渝中区分局"),
    ("210102", "辽宁省沈阳市和平区", "沈阳市公安局和平分局"),
)
_REGION_BY_CODE = {r[0]: r for r in CN_REGIONS}

# (hanzi, pinyin) pools of very common name parts.
CN_SURNAMES: tuple[tuple[str, str], ...] = (
    ("张", "ZHANG"), ("李", "LI"), ("王", "WANG"), ("刘", "LIU"), ("陈", "CHEN"), ("杨", "YANG"),
    ("赵", "ZHAO"), ("黄", "HUANG"), ("周", "ZHOU"), ("吴", "WU"), ("徐", "XU"), ("孙", "SUN"),
    ("胡", "HU"), ("朱", "ZHU"), ("高", "GAO"), ("林", "LIN"), ("何", "HE"), ("郭", "GUO"),
    ("马", "MA"), ("罗", "LUO"),
)
CN_GIVEN: tuple[tuple[str, str], ...] = (
    ("伟", "WEI"), ("娜", "NA"), ("芳", "FANG"), ("洋", "YANG"), ("静", "JING"), ("磊", "LEI"),
    ("敏", "MIN"), ("婷", "TING"), ("昊", "HAO"), ("丽", "LI"), ("俊", "JUN"), ("琳", "LIN"),
    ("斌", "BIN"), ("雪", "XUE"), ("峰", "FENG"), ("晓", "XIAO"), ("明", "MING"), ("华", "HUA"),
    ("建", "JIAN"), ("秀", "XIU"), ("英", "YING"), ("文", "WEN"), ("军", "JUN"), ("玉", "YU"),
    ("兰", "LAN"), ("海", "HAI"), ("涛", "TAO"), ("鹏", "PENG"), ("欣", "XIN"), ("怡", "YI"),
    ("宇", "YU"), ("涵", "HAN"), ("浩", "HAO"), ("思", "SI"), ("佳", "JIA"),
)
CN_ETHNICITIES = ("汉", "汉", "汉", "汉", "汉", "汉", "回", "满", "壮", "蒙古", "维吾尔", "土家")
CN_STREETS = ("人民路", "解放路", "建设大街", "中山路", "和平里", "文化路", "青年路", "长安街", "光明路",
              "幸福里", "东风路", "朝阳路")

LATIN_SURNAMES = ("SMITH", "ERIKSSON", "MUELLER", "GARCIA", "MARTIN", "DUBOIS", "ROSSI", "NOVAK",
                  "KOWALSKI", "JANSEN", "SILVA", "ANDERSSON", "NGUYEN", "TANAKA", "KIM", "PATEL",
                  "BROWN", "VAN DER BERG", "OCONNOR", "MORENO", "LINDQVIST", "HOFFMANN")
LATIN_GIVEN = ("ANNA", "JOHN", "MARIA", "PETER", "SOPHIE", "LUCAS", "EMMA", "OLIVER", "MIA", "NOAH",
               "ELENA", "DAVID", "LAURA", "THOMAS", "SARA", "JAN", "CLARA", "HUGO", "ALICE", "MARK")
# (code, printed state name) -- UTO is the ICAO specimen state.
STATES: tuple[tuple[str, str], ...] = (
    ("UTO", "UTOPIA"), ("UTO", "UTOPIA"), ("GBR", "UNITED KINGDOM"), ("CAN", "CANADA"),
    ("NLD", "NETHERLANDS"), ("FRA", "FRANCE"), ("SWE", "SWEDEN"), ("AUS", "AUSTRALIA"),
    ("IRL", "IRELAND"), ("ITA", "ITALY"),
)
_STATE_NAMES = dict(STATES) | {"CHN": "CHINA"}
MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")


def add_years(d: dt.date, years: int) -> dt.date:
    try:
        return d.replace(year=d.year + years)
    except ValueError:  # 29 Feb
        return d.replace(year=d.year + years, day=28)


def cn_validity_years(birth: dt.date, issued: dt.date) -> int | None:
    """Validity period by age at issue (居民身份证法 Art. 5); None = 长期."""
    age = issued.year - birth.year - ((issued.month, issued.day) < (birth.month, birth.day))
    if age < 16:
        return 5
    if age <= 25:
        return 10
    if age <= 45:
        return 20
    return None


@dataclass(frozen=True)
class CNPerson:
    """Everything printed on both sides of a 居民身份证."""

    name: str
    sex: str  # "M" | "F"
    ethnicity: str
    birth: dt.date
    address: str
    id_number: str
    issuer: str
    valid_from: dt.date
    valid_to: dt.date | None  # None = 长期

    @property
    def sex_cn(self) -> str:
        return "男" if self.sex == "M" else "女"

    @property
    def birth_printed(self) -> str:
        return f"{self.birth.year} 年 {self.birth.month} 月 {self.birth.day} 日"

    def validity_printed(self, sep: str = "-") -> str:
        end = "长期" if self.valid_to is None else f"{self.valid_to:%Y.%m.%d}"
        return f"{self.valid_from:%Y.%m.%d}{sep}{end}"

    @property
    def expiry_iso(self) -> str:
        return "long-term" if self.valid_to is None else self.valid_to.isoformat()


def make_cn_person(name: str, sex: str, birth: dt.date, region: str, issued: dt.date, sequence: int,
                   street: str = "人民路", house: int = 18, ethnicity: str = "汉",
                   valid_years: int | None | str = "auto") -> CNPerson:
    """A fixed identity. ``valid_years='auto'`` applies the statutory period for the age at issue."""
    code, prefix, issuer = _REGION_BY_CODE[region]
    years = cn_validity_years(birth, issued) if valid_years == "auto" else valid_years
    valid_to = None if years is None else add_years(issued, int(years))
    return CNPerson(name=name, sex=sex, ethnicity=ethnicity, birth=birth,
                    address=f"{prefix}{street}{house}号", id_number=make_cn_id_number(code, birth, sequence, sex),
                    issuer=issuer, valid_from=issued, valid_to=valid_to)


def random_date(rng: random.Random, start: dt.date, end: dt.date) -> dt.date:
    return start + dt.timedelta(days=rng.randrange((end - start).days + 1))


def random_cn_person(rng: random.Random, long_term: bool | None = None) -> CNPerson:
    """A random identity; ``long_term`` forces (True) or forbids (False) a 长期 card."""
    region = rng.choice(CN_REGIONS)
    sur = rng.choice(CN_SURNAMES)[0]
    given = "".join(rng.choice(CN_GIVEN)[0] for _ in range(rng.choice((1, 1, 2))))
    sex = rng.choice("MF")
    for _ in range(100):
        birth = random_date(rng, dt.date(1950, 1, 1), dt.date(2004, 12, 31))
        issued = random_date(rng, max(add_years(birth, 16), dt.date(2008, 1, 1)), dt.date(2025, 12, 31))
        years = cn_validity_years(birth, issued)
        if long_term is None or (years is None) == long_term:
            break
    else:  # pragma: no cover - the date ranges always allow both kinds
        raise RuntimeError("could not draw a matching CN identity")
    street = rng.choice(CN_STREETS)
    house = rng.randint(1, 300)
    addr = f"{region[1]}{street}{house}号"
    if rng.random() < 0.5:
        addr += f"{rng.randint(1, 20)}栋{rng.randint(1, 6)}单元{rng.randint(1, 30)}0{rng.randint(1, 4)}室"
    return CNPerson(name=sur + given, sex=sex, ethnicity=rng.choice(CN_ETHNICITIES), birth=birth,
                    address=addr, id_number=make_cn_id_number(region[0], birth, rng.randint(1, 999), sex),
                    issuer=region[2], valid_from=issued,
                    valid_to=None if years is None else add_years(issued, years))


# --------------------------------------------------------------------------------------------------------
# ICAO 9303 MRZ
# --------------------------------------------------------------------------------------------------------


def mrz_value(c: str) -> int:
    if c.isdigit():
        return int(c)
    if "A" <= c <= "Z":
        return ord(c) - ord("A") + 10
    if c == "<":
        return 0
    raise ValueError(f"invalid MRZ character {c!r}")


def mrz_check_digit(field_: str) -> str:
    """ICAO 9303 check digit: weights 7,3,1 repeating, sum mod 10."""
    weights = (7, 3, 1)
    return str(sum(mrz_value(c) * weights[i % 3] for i, c in enumerate(field_)) % 10)


def mrz_field(text: str, width: int) -> str:
    """Uppercase, accents dropped from their letters (È to E), spaces/hyphens to '<' (kept as is), drop other
    punctuation, pad with '<' to ``width`` (no truncation)."""
    out = []
    for ch in unicodedata.normalize("NFKD", text.upper()):
        if "A" <= ch <= "Z" or ch.isdigit():
            out.append(ch)
        elif ch in " -<":
            out.append("<")
    s = "".join(out)
    if len(s) > width:
        raise ValueError(f"{text!r} does not fit in {width} MRZ chars")
    return s.ljust(width, "<")


def mrz_name(surname: str, given: str, width: int) -> str:
    return mrz_field(f"{surname}<<{given}", width) if given else mrz_field(surname, width)


def yymmdd(d: dt.date) -> str:
    return f"{d:%y%m%d}"


@dataclass(frozen=True)
class MRZPerson:
    """A machine-readable travel document holder: names are already uppercase Latin."""

    surname: str
    given_names: str
    sex: str  # "M" | "F" | "<"
    birth: dt.date
    nationality: str
    issuing_state: str
    doc_number: str
    issued: dt.date
    expiry: dt.date
    optional: str = ""  # personal number / optional data
    place_of_birth: str = ""
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def full_name(self) -> str:
        """Ground-truth form: 'SURNAME GIVEN NAMES'."""
        return f"{self.surname} {self.given_names}".strip()

    @property
    def state_name(self) -> str:
        return _STATE_NAMES.get(self.issuing_state, self.issuing_state)

    # --- MRZ builders -----------------------------------------------------------------------------------

    def _num(self) -> str:
        n = mrz_field(self.doc_number, 9)
        return n + mrz_check_digit(n)

    def _dob(self) -> str:
        return yymmdd(self.birth) + mrz_check_digit(yymmdd(self.birth))

    def _exp(self) -> str:
        return yymmdd(self.expiry) + mrz_check_digit(yymmdd(self.expiry))

    def td3(self, doc_code: str = "P<") -> tuple[str, str]:
        """Passport: 2 x 44."""
        l1 = mrz_field(doc_code, 2) + self.issuing_state + mrz_name(self.surname, self.given_names, 39)
        personal = mrz_field(self.optional, 14)
        pcheck = "<" if set(personal) == {"<"} else mrz_check_digit(personal)
        l2 = self._num() + mrz_field(self.nationality, 3) + self._dob() + self.sex + self._exp() + personal + pcheck
        composite = l2[0:10] + l2[13:20] + l2[21:43]
        return l1, l2 + mrz_check_digit(composite)

    def td2(self, doc_code: str = "I<") -> tuple[str, str]:
        """Card / official document: 2 x 36."""
        l1 = mrz_field(doc_code, 2) + self.issuing_state + mrz_name(self.surname, self.given_names, 31)
        l2 = (self._num() + mrz_field(self.nationality, 3) + self._dob() + self.sex + self._exp()
              + mrz_field(self.optional, 7))
        composite = l2[0:10] + l2[13:20] + l2[21:35]
        return l1, l2 + mrz_check_digit(composite)

    def td1(self, doc_code: str = "I<") -> tuple[str, str, str]:
        """ID card: 3 x 30."""
        l1 = mrz_field(doc_code, 2) + self.issuing_state + self._num() + mrz_field(self.optional, 15)
        l2 = self._dob() + self.sex + self._exp() + mrz_field(self.nationality, 3) + mrz_field("", 11)
        composite = l1[5:30] + l2[0:7] + l2[8:15] + l2[18:29]
        l2 += mrz_check_digit(composite)
        l3 = mrz_name(self.surname, self.given_names, 30)
        return l1, l2, l3

    def mrva(self, doc_code: str = "V<") -> tuple[str, str]:
        """Visa, format A: 2 x 44, no composite check digit."""
        l1 = mrz_field(doc_code, 2) + self.issuing_state + mrz_name(self.surname, self.given_names, 39)
        l2 = (self._num() + mrz_field(self.nationality, 3) + self._dob() + self.sex + self._exp()
              + mrz_field(self.optional, 16))
        return l1, l2


def printed_date(d: dt.date) -> str:
    """Visual-zone date as on most passports: '07 MAR 1990'."""
    return f"{d.day:02d} {MONTHS[d.month - 1]} {d.year}"


def _doc_number(rng: random.Random, state: str) -> str:
    letters = "ABCDEFGHJKLMNPRSTUVWXYZ"
    if state == "CHN":
        return "E" + "".join(rng.choice("0123456789") for _ in range(8))
    return (rng.choice(letters) + rng.choice(letters)
            + "".join(rng.choice("0123456789") for _ in range(7)))


def random_mrz_person(rng: random.Random, kind: str = "passport", expired: bool = False,
                      today: dt.date = dt.date(2026, 1, 1)) -> MRZPerson:
    """A random MRZ holder. ``kind`` picks validity length (passport 10y, id_card 10y, visa 1y)."""
    if rng.random() < 0.2:
        sur, given = rng.choice(CN_SURNAMES)[1], "".join(rng.choice(CN_GIVEN)[1] for _ in range(rng.choice((1, 2))))
        code, nat = "CHN", "CHN"
    else:
        sur = rng.choice(LATIN_SURNAMES)
        given = " ".join(rng.sample(LATIN_GIVEN, rng.choice((1, 1, 2))))
        code = rng.choice(STATES)[0]
        nat = code
    if kind == "visa":
        # a visa is issued by one state to a national of another
        nat = code
        code = rng.choice([s for s, _ in STATES if s != nat])
    birth = random_date(rng, dt.date(1950, 1, 1), dt.date(2005, 12, 31))
    years = 1 if kind == "visa" else 10
    if expired:
        expiry = random_date(rng, today - dt.timedelta(days=900), today - dt.timedelta(days=30))
    else:
        expiry = random_date(rng, today + dt.timedelta(days=60), add_years(today, years))
    issued = add_years(expiry, -years) + dt.timedelta(days=1)
    return MRZPerson(surname=sur, given_names=given, sex=rng.choice("MF"), birth=birth, nationality=nat,
                     issuing_state=code, doc_number=_doc_number(rng, code), issued=issued, expiry=expiry,
                     place_of_birth=rng.choice(("ZENITH", "LONDON", "PARIS", "OTTAWA", "BEIJING", "ROMA",
                                                "STOCKHOLM", "SYDNEY", "DUBLIN", "AMSTERDAM")))


def mrz_name_from_lines(name_field: str) -> str:
    """'SURNAME<<GIVEN<NAMES<<<' -> 'SURNAME GIVEN NAMES' (used for ground truth)."""
    sur, _, given = name_field.rstrip("<").partition("<<")
    return " ".join(p for p in (sur.replace("<", " "), given.replace("<", " ").strip()) if p).strip()
