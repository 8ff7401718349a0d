"""Human review of a run: what needs a person (failures, records below the auto-accept threshold), a
self-contained HTML page with thumbnails inside OUT, and the corrections people make (OUT/corrections/).

No Prefect imports: `flows/review.py` asks for corrections in the Prefect UI and calls these functions.
"""
