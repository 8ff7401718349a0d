"""The review page in real headless Chromium: a run over a few blurred (low-confidence or unreadable) documents,
the sample's two files that cannot be read and two of its pages read right; every failure and
every record below the threshold is on the page, each with its picture when the page can be prepared, and the
records read right are not; the page is self-contained. A screenshot is kept in the temp folder (or
IDFLOW_SCREENSHOT_DIR).

The run reads only the sample pages a view needs: each page is an embedded reading of a few seconds, and the
sample's reading as a whole is tested in test_flow_extract.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.datamodel import FIELD_NAMES
from pipeline.review.queue import build_queue
from pipeline.review.thumbnails import THUMBNAIL_LONG_EDGE
from pipeline.store.parquet import FAILURES, RESULTS, read_table
from tests.support.browser import Browser, BrowserBinaries
from tests.support.paths import REPO
from tests.support.review_data import BLURRED, review_inputs

THRESHOLD = 0.9
# failures (one at ingest, one at preprocess) and two pages auto-accepted, whose blurred copies are on the page
SAMPLE_FILES = ("broken.jpg", "truncated.png", "cn_front.jpg", "passport_td3.jpg")

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def reviewed_run(prefect_api: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(input folder, OUT) after `idflow run` over the inputs (a real run against the test Prefect server)."""
    tmp = tmp_path_factory.mktemp("review")
    inbox = review_inputs(tmp / "in", sample=SAMPLE_FILES)
    out = tmp / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PREFECT_API_URL": prefect_api}
    done = subprocess.run([sys.executable, "-m", "idflow", "run", str(inbox), "--out", str(out)], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    yield inbox, out


def test_the_extract_run_links_its_review_page_and_summary_without_personal_data(
        reviewed_run: tuple[Path, Path]) -> None:
    """The extract flow's publish step wrote the page and put the link and the summary in the run's artifacts."""
    from prefect.client.orchestration import get_client

    _, out = reviewed_run
    (run_json,) = (out / "runs").glob("*.json")
    page = out / "review" / f"{run_json.stem}.html"
    assert page.is_file()
    with get_client(sync_client=True) as client:
        artifacts = {a.key: a for a in client.read_artifacts()
                     if str(a.flow_run_id).startswith(run_json.stem)}  # the run id is the flow run's id prefix
        assert f"({page.resolve().as_uri()})" in str(artifacts["idflow-review-page"].data)  # a markdown link
        summary = str(artifacts["idflow-review-summary"].data)
    assert "low_confidence" in summary and "no_fields_found" in summary and "0.8–0.9" in summary
    numbers = [r["id_number"] for r in read_table(out, RESULTS).to_pylist() if r["id_number"]]
    names = [r["name"] for r in read_table(out, RESULTS).to_pylist() if r["name"]]
    assert not [v for v in numbers + names if v in summary]  # masked numbers only, no names, no pictures
    assert "data:image" not in summary and "1101**********1233" in summary


def _run_id(out: Path) -> str:
    (run_json,) = (out / "runs").glob("*.json")
    return run_json.stem


def _expected(out: Path) -> dict[str, str]:
    """source path -> "failure" | "low_confidence", straight from the Parquet files."""
    expected = {r["source_path"]: "failure" for r in read_table(out, FAILURES).to_pylist()}
    for row in read_table(out, RESULTS).to_pylist():
        confidences = [row[f"{n}_confidence"] for n in FIELD_NAMES if row[f"{n}_confidence"] is not None]
        if confidences and min(confidences) < THRESHOLD:
            expected[row["source_path"]] = "low_confidence"
    return expected


def test_review_page_shows_every_failure_and_flagged_record_with_its_picture(
        browser_binaries: BrowserBinaries, reviewed_run: tuple[Path, Path]) -> None:
    _, out = reviewed_run
    env = {**os.environ, "PYTHONPATH": str(REPO), "IDFLOW_REVIEW_THRESHOLD": str(THRESHOLD)}
    done = subprocess.run([sys.executable, "-m", "idflow", "review", str(out)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # without --run: what every run in OUT left open (one run here), beside the run's own page
    pages = [out / "review" / "open.html"]
    assert pages[0].is_file() and "open.html" in done.stdout.replace("\n", "")
    assert {p.name for p in (out / "review").glob("*.html")} == {"open.html", f"{_run_id(out)}.html"}
    html = pages[0].read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html) and "<script" not in html  # offline

    expected = _expected(out)
    assert {f"blurred_{Path(n).stem}.jpg" for n in BLURRED} <= set(expected)  # the blurred ones need a person
    assert sum(kind == "low_confidence" for kind in expected.values()) >= 3
    assert {"broken.jpg", "truncated.png"} <= set(expected)
    assert not {"cn_front.jpg", "passport_td3.jpg"} & set(expected)  # read right: not for a person

    shots = Path(os.environ.get("IDFLOW_SCREENSHOT_DIR", pages[0].parent.parent.parent))
    shots.mkdir(parents=True, exist_ok=True)
    with Browser(out.parent, browser_binaries) as browser:
        browser.open(pages[0].resolve().as_uri())
        browser.wait_for_element("css selector", "section.item")
        items = browser.script("""
            return [...document.querySelectorAll('section.item')].map(s => {
              const img = s.querySelector('.pic img');
              return {path: s.querySelector('h2').innerText, kind: s.dataset.kind, reason: s.dataset.reason,
                      img: img ? [img.complete, img.naturalWidth, img.naturalHeight] : null,
                      nopic: (s.querySelector('.nopic') || {}).innerText || '',
                      fields: s.querySelectorAll('table.fields tr').length,
                      issuer: (s.querySelector('td.issuer') || {}).innerText || null,
                      expired: (s.querySelector('td.expired') || {}).innerText || null,
                      nothing: !!s.querySelector('.nothing')};
            })""")
        browser.screenshot(shots / "review-page.png")

    shown = {re.sub(r"^\d+\. ", "", i["path"]).split(" · ")[0]: i for i in items}
    assert {p: i["kind"] for p, i in shown.items()} == expected
    for path, item in shown.items():
        # header, document type and 3 fields; a record also its issuer and whether it had expired
        assert item["fields"] == (5 if item["kind"] == "failure" else 7) or (item["kind"] == "failure"
                                                                           and item["nothing"]), path
        assert (item["issuer"] is None) == (item["expired"] is None) == (item["kind"] == "failure"), path
        if item["kind"] == "low_confidence" or path.startswith("blurred_"):
            complete, width, height = item["img"]
            assert complete and 0 < max(width, height) <= THUMBNAIL_LONG_EDGE, path
        elif item["img"] is None:
            assert "no picture" in item["nopic"], path
    assert shown["broken.jpg"]["img"] is None and "cannot be prepared" in shown["broken.jpg"]["nopic"]
    assert shown["blurred_cn_front.jpg"]["issuer"] == "CHN"  # a 居民身份证: the PRC's, the page need not say it
    assert shown["blurred_cn_front.jpg"]["expired"].startswith("unknown")  # a front prints no end date
    # Sorted by need: failures that will never be retried, then records from the least confident up.
    kinds = [i["kind"] for i in items]
    assert kinds == sorted(kinds, key=lambda k: k != "failure")
    assert (shots / "review-page.png").stat().st_size > 10_000


def test_a_missing_or_changed_source_is_named_instead_of_a_picture(reviewed_run: tuple[Path, Path],
                                                                    tmp_path: Path) -> None:
    inbox, out = reviewed_run
    moved = tmp_path / "moved"
    moved.mkdir()
    gone, changed = inbox / "blurred_visa_mrva.jpg", inbox / "blurred_passport_td3.jpg"
    shutil.move(gone, moved / gone.name)
    shutil.copy(changed, moved / changed.name)
    changed.write_bytes(changed.read_bytes() + b"\0")
    try:
        items = {i.source_path: i for i in build_queue(out, threshold=THRESHOLD).items}
    finally:
        shutil.move(moved / gone.name, gone)
        shutil.copy(moved / changed.name, changed)
    assert items[gone.name].thumbnail.data_uri is None and "gone" in items[gone.name].thumbnail.note
    assert items[changed.name].thumbnail.data_uri is None and "changed" in items[changed.name].thumbnail.note
    assert items["blurred_cn_front.jpg"].thumbnail.data_uri.startswith("data:image/jpeg;base64,")


def test_a_record_without_confidences_is_shown_to_a_person() -> None:
    """A model's answer carries no confidence (nothing measured how often it is right): it is not auto-accepted;
    an embedded reading's own confidences decide (an absent field is sure, 1.0)."""
    from pipeline.review.queue import record_confidence

    model = {"name_confidence": None, "id_number_confidence": None, "expiry_date_confidence": None}
    assert record_confidence(model) == 0.0 < THRESHOLD
    embedded = {"name_confidence": 0.99, "id_number_confidence": 0.98, "expiry_date_confidence": 1.0}
    assert record_confidence(embedded) == pytest.approx(0.98)
