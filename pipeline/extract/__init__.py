"""Extraction backends behind one protocol (`base.py`), declared once in `registry.py`: the embedded OCR (`ocr/`),
model endpoints (`model/`: the OpenAI-compatible client, the vLLM pool) and `hybrid.py`."""
