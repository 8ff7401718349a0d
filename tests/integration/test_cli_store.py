"""The store through the real `idflow` command (subprocesses) against a chat server on loopback: two runs on one
OUT store and pay for each document once (the second refuses, or waits with --wait); odd file names survive a
run into Parquet and back, and `idflow retry` finds the files again; a failure repeated on three runs shows
once with attempts=3."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from idflow.cli import app
from pipeline.review.failure_queue import current_failures
from pipeline.store.parquet import FAILURES, RESULTS, RUNS, read_table, source_file_name
from tests.support.chat_server import ChatServer, ServerConfig
from tests.support.paths import REPO

KEY = "sk-store-test-3c1e5a7d9b"
SAMPLES = ("passport_td3.jpg", "cn_front.jpg", "id_card_td1.jpg", "visa_mrva.jpg")
WAITING = "waiting for the output lock"


class GatedServer(ChatServer):
    """Holds every chat request until `gate` opens; `arrived` tells that the first one came in (so its run
    holds OUT's lock: it is taken before anything is read or sent)."""

    def __init__(self, config: ServerConfig) -> None:
        super().__init__(config)
        self.gate, self.arrived = threading.Event(), threading.Event()

    def enter(self) -> None:
        self.arrived.set()
        self.gate.wait(600)
        super().enter()


@pytest.fixture
def gated() -> Iterator[GatedServer]:
    server = GatedServer(ServerConfig(api_key=KEY)).start()
    try:
        yield server
    finally:
        server.gate.set()
        server.stop()


def _env(prefect_api: str, base_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "IDFLOW_OPENAI_KEY_BLOCK"}
    env.update(PREFECT_API_URL=prefect_api, PYTHONPATH=str(REPO), TAOTOKEN_API_KEY=KEY, TAOTOKEN_BASE_URL=base_url,
               TAOTOKEN_MODEL="test-vlm", IDFLOW_CONCURRENCY="2", IDFLOW_OPENAI_TIMEOUT_S="600", COLUMNS="1000",
               IDFLOW_OPENAI_CROSSCHECK="false", **extra)  # the second reading has tests of its own
    return env


def _idflow(*args: str, env: dict[str, str], **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "idflow", *args], cwd=REPO, env=env, text=True,
                            stderr=subprocess.STDOUT, **kw)


def _folder(tmp_path: Path, sample_dir: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    for sample in SAMPLES:
        shutil.copy(sample_dir / sample, folder / f"{name}-{sample}")
    return folder


def _stored_keys(out: Path) -> list[tuple[str, int]]:
    keys = []
    for name in (RESULTS, FAILURES):
        table = read_table(out, name, ["sha256", "page"])
        keys += [] if table is None else [(r["sha256"], r["page"]) for r in table.to_pylist()]
    return keys


def _summaries(out: Path) -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in (out / RUNS).glob("*.json")]


@pytest.mark.parametrize("mode", ["refuse", "wait"])
def test_two_runs_on_one_out_store_and_pay_once(prefect_api, gated: GatedServer, sample_dir: Path, tmp_path: Path,
                                                mode: str) -> None:
    """Run A holds OUT (its requests held at the server); run B on another folder with the same content either
    refuses with exit 2 or waits, then skips everything A did."""
    first, second = _folder(tmp_path, sample_dir, "first"), _folder(tmp_path, sample_dir, "second")
    out, env = tmp_path / "out", _env(prefect_api, gated.base_url)
    with (tmp_path / "a.log").open("w") as log:
        run_a = _idflow("run", str(first), "--out", str(out), "--backend", "openai", env=env, stdout=log)
        try:
            assert gated.arrived.wait(300), "run A sent no request"
            wait = ["--wait"] if mode == "wait" else []
            run_b = _idflow("run", str(second), "--out", str(out), "--backend", "openai", *wait, env=env,
                            stdout=subprocess.PIPE)
            if mode == "refuse":
                said, _ = run_b.communicate(timeout=300)
                assert run_b.returncode == 2, said[-3000:]
                assert "is being written by run" in " ".join(said.split())
            else:
                said = ""
                while WAITING not in said and (line := run_b.stdout.readline()):
                    said += line
                assert WAITING in said, said[-3000:]
        finally:
            gated.gate.set()
            assert run_a.wait(300) == 0, (tmp_path / "a.log").read_text()[-3000:]
    if mode == "wait":
        rest, _ = run_b.communicate(timeout=300)
        assert run_b.returncode == 0, rest[-3000:]

    keys = _stored_keys(out)
    assert len(keys) == len(set(keys)) == len(SAMPLES)  # stored once
    assert len(gated.chat_requests()) == len(SAMPLES)  # paid once
    summaries = _summaries(out)
    assert len(summaries) == (2 if mode == "wait" else 1) and all(s["accounted"] for s in summaries)
    if mode == "wait":
        later = min(summaries, key=lambda s: s["results"] + s["failures"])
        assert later["skipped_by_reason"] == {"already_done": len(SAMPLES)} and later["failures"] == 0
    assert not list(out.rglob("*.tmp"))


ODD_NAMES = [b"caf\xe9-latin1.jpg", b"two\nlines.jpg", b"quo\"te 'single'.jpg", b"tab\there.jpg",
             b"[bold]markup.jpg"]


def test_odd_names_through_runs_show_and_retry(prefect_api, serve, sample_dir: Path, tmp_path: Path) -> None:
    """Names that are not UTF-8 or hold a newline, quotes, a tab or rich markup: three failing runs into
    Parquet, `idflow show` lists each document once with attempts=3, `idflow retry` finds every file again."""
    server = serve(default_fault="503")
    inbox = tmp_path / "in"
    inbox.mkdir()
    for raw, sample in zip(ODD_NAMES, [*SAMPLES, "cn_back.jpg"], strict=True):
        with open(os.path.join(os.fsencode(inbox), raw), "wb") as fh:
            fh.write((sample_dir / sample).read_bytes())
    out = tmp_path / "out"
    env = _env(prefect_api, server.base_url, IDFLOW_OPENAI_MAX_ATTEMPTS="1")
    names = sorted(os.fsdecode(raw) for raw in ODD_NAMES)

    for _ in range(3):
        said, _ = _idflow("run", str(inbox), "--out", str(out), "--backend", "openai", env=env,
                          stdout=subprocess.PIPE).communicate(timeout=600)
        assert "seen = results + failures + skipped: yes" in said, said[-3000:]
    history = read_table(out, FAILURES).to_pylist()
    assert len(history) == 3 * len(ODD_NAMES) and {r["reason"] for r in history} == {"server_error"}
    queue = current_failures(out).to_pylist()
    assert sorted(source_file_name(r) for r in queue) == names  # exact names back from Parquet
    assert {r["attempts"] for r in queue} == {3}

    # `idflow show` in a process of its own: the console's width is its environment's (COLUMNS=1000), not what
    # an earlier test left in this process's console
    shown, _ = _idflow("show", str(out), env=env, stdout=subprocess.PIPE).communicate(timeout=300)
    assert f"failure queue ({len(ODD_NAMES)} documents" in shown, shown
    rows = [line for line in shown.splitlines() if line.startswith("│") and "server_error" in line]
    assert len(rows) == len(ODD_NAMES) and all("│ 3 " in line for line in rows)
    assert "caf\\xe9-latin1.jpg" in shown and "[bold]markup.jpg" in shown

    server.config.default_fault = "ok"
    said, _ = _idflow("retry", str(out), "--backend", "openai", "--max-attempts", "4", env=env,
                      stdout=subprocess.PIPE).communicate(timeout=600)
    assert "resolved by this run" in said, said[-3000:]
    results = read_table(out, RESULTS).to_pylist()
    assert sorted(source_file_name(r) for r in results) == names
    assert len(server.chat_requests()) == 4 * len(ODD_NAMES)  # three failing runs and one retry each
    assert current_failures(out).num_rows == 0
    assert "failure queue" not in CliRunner().invoke(app, ["show", str(out)]).output
