"""`idflow batch import` on odd inputs: an output imported twice or into an OUT a live run filled, a damaged OUT,
lines whose usage or content is odd, hand-edited manifests, duplicated lines, a BOM and a truncated last line.
Real files throughout: an export written by `export_requests`, outputs written as a batch API would, and the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from idflow.batch import batch_app
from idflow.cli import app
from pipeline.datamodel import Extraction, Failure, Reason
from pipeline.ops.batch_files import import_responses, manifest_path, read_manifest
from pipeline.review.failure_queue import current_failures
from pipeline.run.engine import finish
from pipeline.store.parquet import FAILURES, RESULTS, RUNS, RunWriter, read_table, write_run_summary
from pipeline.trust.table import Trust
from tests.support.chat_server import VALID_ANSWER
from tests.unit.test_batch_files import MODEL, completion, export, output_line


def _flat(text: str) -> str:
    return " ".join(text.split())


def _import(output: Path, out: Path, *extra: str) -> Any:
    return CliRunner().invoke(batch_app, ["import", str(output), "--out", str(out), *extra])


def _summary(out: Path, result: Any) -> dict[str, Any]:
    run_id = re.search(r"run ([0-9a-f-]{36}):", result.output).group(1)
    return json.loads((out / RUNS / f"{run_id}.json").read_text(encoding="utf-8"))


def _all_answered(tmp_path: Path, n: int = 3) -> tuple[Path, list[Any]]:
    path, pages = export(tmp_path, n=n)
    output = tmp_path / "batch_out.jsonl"
    output.write_text("".join(output_line(p.ref.key, body=completion(json.dumps(VALID_ANSWER))) + "\n"
                              for p in pages))
    return output, pages


def test_importing_the_same_output_twice_stores_each_page_once(tmp_path: Path) -> None:
    output, pages = _all_answered(tmp_path)
    out = tmp_path / "out"
    first = _import(output, out)
    assert first.exit_code == 0, first.output
    again = _import(output, out)
    assert again.exit_code == 0, again.output
    results = read_table(out, RESULTS).to_pylist()
    assert sorted(r["source_path"] for r in results) == ["doc0.jpg", "doc1.jpg", "doc2.jpg"]
    counts = [{k: s[k] for k in ("seen", "results", "failures", "skipped", "accounted")}
              for s in (_summary(out, first), _summary(out, again))]
    # 3 pages + 1 page that failed before export; the failed one is tried again, as a run tries failures again
    assert counts == [{"seen": 4, "results": 3, "failures": 1, "skipped": 0, "accounted": True},
                      {"seen": 4, "results": 0, "failures": 1, "skipped": 3, "accounted": True}]
    assert _summary(out, again)["skipped_by_reason"] == {"already_done": 3}
    assert "3 pages skipped" in _flat(again.output)


def test_pages_a_live_run_stored_are_not_stored_again(tmp_path: Path) -> None:
    """A live `--backend vllm` run has another fingerprint than the export: its results still count as done."""
    output, pages = _all_answered(tmp_path)
    out = tmp_path / "out"
    live = RunWriter(out, "live-run", "fp-live-vllm")
    for page in pages[:2]:
        live.add(finish(Extraction(ref=page.ref, fields=dict(VALID_ANSWER), backend="vllm", model=MODEL), page,
                        Trust(None)))
    live.add(Failure.for_ref(pages[2].ref, "request", Reason.TIMEOUT, "timed out", backend="vllm"))
    live.flush()
    result = _import(output, out)
    assert result.exit_code == 0, result.output
    rows = sorted((r["source_path"], r["backend"]) for r in read_table(out, RESULTS).to_pylist())
    assert rows == [("doc0.jpg", "vllm"), ("doc1.jpg", "vllm"), ("doc2.jpg", "batch")]  # a failure is not done
    summary = _summary(out, result)
    assert (summary["seen"], summary["results"], summary["failures"], summary["skipped"]) == (4, 1, 1, 2)
    assert summary["accounted"] and summary["backend"] == "batch" and summary["fingerprint"] == "fp-test"
    assert "doc2.jpg" not in {r["source_path"] for r in current_failures(out).to_pylist()}


def test_a_damaged_results_part_makes_import_refuse(tmp_path: Path) -> None:
    output, _ = _all_answered(tmp_path)
    out = tmp_path / "out"
    assert _import(output, out).exit_code == 0
    [part] = (out / RESULTS).rglob("*.parquet")
    part.write_bytes(part.read_bytes()[:40])  # damaged from outside (a copy cut short)
    parts_before = sorted(out.rglob("*.parquet"))
    result = _import(output, out)
    assert result.exit_code == 2 and "cannot be read" in _flat(result.output), result.output
    assert "configuration error" in result.output and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert sorted(out.rglob("*.parquet")) == parts_before  # nothing stored


def test_odd_usage_or_content_costs_that_line_only(tmp_path: Path) -> None:
    path, pages = export(tmp_path, n=5)
    keys = [p.ref.key for p in pages]
    answer = json.dumps(VALID_ANSWER)
    text_usage, list_usage = completion(answer), completion(answer)
    text_usage["usage"] = {"prompt_tokens": "abc", "completion_tokens": 40}
    list_usage["usage"] = [700, 40]
    as_object, as_parts = completion(answer), completion(answer)
    as_object["choices"][0]["message"]["content"] = dict(VALID_ANSWER)
    as_parts["choices"][0]["message"]["content"] = [{"type": "text", "text": answer}]
    output = tmp_path / "batch_out.jsonl"
    output.write_text("\n".join([output_line(keys[0], body=text_usage), output_line(keys[1], body=list_usage),
                                 output_line(keys[2], body=as_object), output_line(keys[3], body=as_parts),
                                 "[" * 100_000,  # nested too deep for the JSON reader
                                 output_line(keys[4], body=completion(answer))]) + "\n")
    report = import_responses(output, read_manifest(manifest_path(path)))
    assert report.unattributed_lines == 1
    first, second, third, fourth, fifth = report.outcomes
    assert isinstance(first, Extraction) and (first.prompt_tokens, first.completion_tokens) == (0, 40)
    assert isinstance(second, Extraction) and (second.prompt_tokens, second.completion_tokens) == (0, 0)
    for failure in (third, fourth):  # as the live backend: not a chat completion, retryable
        assert isinstance(failure, Failure) and failure.reason == Reason.SERVER_ERROR and failure.retryable
        assert "not a chat completion" in failure.detail and failure.prompt_tokens == 700
    assert isinstance(fifth, Extraction) and fifth.prompt_tokens == 700

    out = tmp_path / "out"
    result = _import(output, out)
    assert result.exit_code == 0, result.output
    assert sorted(r["source_path"] for r in read_table(out, RESULTS).to_pylist()) == ["doc0.jpg", "doc1.jpg",
                                                                                       "doc4.jpg"]
    failures = {r["source_path"]: r for r in read_table(out, FAILURES).to_pylist()}
    assert {k: (v["reason"], v["retryable"]) for k, v in failures.items()} == {
        "doc2.jpg": ("server_error", True), "doc3.jpg": ("server_error", True),
        "broken.jpg": ("decode_error", False)}


def _edit_first_page(entry: dict[str, Any], edit: str) -> None:
    if edit == "ref_null":
        entry["ref"] = None
    elif edit == "extra_key":
        entry["ref"]["extra"] = 1
    elif edit == "original_size_5":
        entry["prepared"]["original_size"] = 5


@pytest.mark.parametrize("edit", ["ref_null", "extra_key", "original_size_5", "missing_manifest"])
def test_a_hand_edited_or_missing_manifest_is_a_configuration_error(tmp_path: Path, edit: str) -> None:
    output, _ = _all_answered(tmp_path)
    manifest = manifest_path(tmp_path / "requests.jsonl")
    if edit == "missing_manifest":
        manifest = tmp_path / "elsewhere" / "requests.manifest.jsonl"
    else:
        lines = manifest.read_text(encoding="utf-8").splitlines()
        entry = json.loads(lines[1])
        _edit_first_page(entry, edit)
        lines[1] = json.dumps(entry)
        manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    result = _import(output, out, "--manifest", str(manifest))
    assert result.exit_code == 2, result.output
    flat = _flat(result.output)
    assert flat.startswith("configuration error:") and "Traceback" not in flat
    assert ("not found" in flat) if edit == "missing_manifest" else ("line 2:" in flat)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not (out / RESULTS).exists()


def test_show_prints_an_import_summary_and_tolerates_an_older_one(tmp_path: Path) -> None:
    output, _ = _all_answered(tmp_path)
    out = tmp_path / "out"
    assert _import(output, out).exit_code == 0
    shown = CliRunner().invoke(app, ["show", str(out)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "seen = results + failures + skipped: yes" in shown.output
    # what `batch import` wrote before its summaries kept a run's accounting
    write_run_summary(out, {"run_id": "0" * 8 + "-0000-4000-8000-" + "0" * 12, "backend": "batch",
                            "fingerprint": "fp-test", "source_dir": "/in", "out_dir": str(out)})
    shown = CliRunner().invoke(app, ["show", str(out)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "no accounting" in shown.output and "fingerprint: fp-test" in shown.output
    assert "source_dir_hex" not in shown.output and "results (3 rows" in shown.output


def test_an_answer_beats_an_error_for_the_same_page_whatever_the_order(tmp_path: Path) -> None:
    path, pages = export(tmp_path, n=5)
    keys = [p.ref.key for p in pages]
    answer = json.dumps(VALID_ANSWER)
    other = json.dumps({**VALID_ANSWER, "name": "LI SI"})
    expired = {"code": "batch_expired", "message": "not executed before the window expired"}
    output = tmp_path / "batch_out.jsonl"
    output.write_text("\n".join([
        output_line(keys[0], 500, {"error": {"message": "engine died"}}),  # the original output ...
        output_line(keys[1], body=completion(answer)),
        output_line(keys[2], body=completion(answer)),
        output_line(keys[3], body=completion(answer)),
        output_line(keys[4], 0, error=expired),
        output_line(keys[0], body=completion(answer)),  # ... concatenated with a re-run of its failures
        output_line(keys[1], 0, error=expired),
        output_line(keys[2], body=completion(other)),  # a second, different answer
        output_line(keys[3], body=completion(answer)),  # the same answer again
        output_line(keys[4], body=completion("Sorry, I cannot read this document.")),
    ]) + "\n")
    report = import_responses(output, read_manifest(manifest_path(path)))
    first, second, third, fourth, fifth = report.outcomes
    assert isinstance(first, Extraction) and isinstance(second, Extraction) and isinstance(fourth, Extraction)
    assert isinstance(third, Extraction) and third.fields["name"] == "ZHANG SAN"  # the first kept ...
    assert report.conflicting == [keys[2]] and report.duplicate_lines == 5  # ... and said
    assert isinstance(fifth, Failure) and fifth.reason == Reason.NO_JSON  # the model's answer beats no answer
    assert fifth.raw_response == "Sorry, I cannot read this document."
    out = tmp_path / "out"
    result = _import(output, out)
    assert result.exit_code == 0, result.output
    assert "1 pages have two different answers" in _flat(result.output) and keys[2] in _flat(result.output)
    assert _summary(out, result)["conflicting_answers"] == 1
    assert read_table(out, RESULTS).num_rows == 4


def test_a_bom_and_a_truncated_last_line(tmp_path: Path) -> None:
    path, pages = export(tmp_path, n=2)
    keys = [p.ref.key for p in pages]
    answer = json.dumps(VALID_ANSWER)
    output = tmp_path / "batch_out.jsonl"
    output.write_text("\ufeff" + output_line(keys[0], body=completion(answer)) + "\n"
                      + output_line(keys[1], body=completion(answer))[:-40], encoding="utf-8")
    report = import_responses(output, read_manifest(manifest_path(path)))
    first, second = report.outcomes
    assert isinstance(first, Extraction) and first.fields == VALID_ANSWER
    assert isinstance(second, Failure) and second.retryable and second.reason == Reason.SERVER_ERROR
    assert "truncated" in second.detail and report.unattributed_lines == 1
    out = tmp_path / "out"
    result = _import(output, out)
    assert result.exit_code == 0, result.output
    failures = {r["source_path"]: r for r in read_table(out, FAILURES).to_pylist()}
    assert failures["doc1.jpg"]["retryable"] and failures["doc1.jpg"]["reason"] == "server_error"
    assert [r["source_path"] for r in read_table(out, RESULTS).to_pylist()] == ["doc0.jpg"]
