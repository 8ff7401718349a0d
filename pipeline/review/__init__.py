"""Human review of a run: what needs a person (the failure queue as it stands, records below the auto-accept
threshold, number conflicts across OUT), a self-contained HTML page with thumbnails inside OUT, and the
corrections people make (OUT/corrections/), which are final.

No Prefect imports: `flows/review.py` asks for corrections in the Prefect UI and calls these functions.
"""
