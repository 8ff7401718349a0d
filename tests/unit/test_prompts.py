"""The extraction prompt must offer the model every document type the schema accepts.

Why: a doc_type the prompt never names is one the model cannot answer (it says "unknown" or "id_card" for a
driving licence), and the schema check would never see the difference.
"""

from __future__ import annotations

import json

import pytest

from pipeline.extract.model.prompts import load_prompt
from pipeline.settings import SCHEMA_PATH


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_prompt_names_every_doc_type_of_the_schema(lang: str) -> None:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    doc_types = schema["properties"]["doc_type"]["enum"]
    prompt = load_prompt(lang)

    missing = [t for t in doc_types if f'"{t}"' not in prompt]

    assert not missing, f"{lang} prompt does not offer {missing}"
    assert [k for k in schema["required"] if f'"{k}"' not in prompt] == []
