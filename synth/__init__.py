"""Deterministic synthetic identity-document specimens for tests and evaluation.

Everything here is fake: names come from fixed pools, PRC ID numbers are generated (real region code and
birth date, random sequence, valid MOD 11-2 check character) and MRZ strings carry correct ICAO 9303 check
digits. The check-digit math is implemented locally (``synth.identities``) on purpose, independent of the
pipeline's parsers, so tests that run the pipeline on these specimens are a real cross-check.

Modules:
    identities  -- fake people, PRC ID numbers, MRZ lines
    render      -- Pillow renderers for CN ID front/back, ICAO TD1/TD2/TD3 and MRV-A pages
    conditions  -- capture conditions (rotation, skew, photo, blur, ...) and file containers
    sample_set  -- the committed ``data/sample`` set and the ``eval`` set generator
"""

__all__ = ["identities", "render", "conditions", "sample_set"]
