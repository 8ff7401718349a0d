"""Upload folders in an inbox: when one is complete, and which ones are already done.

Shared by the watcher (`flows/watch.py`, announces complete folders) and the nightly flow
(`flows/nightly.py`, processes complete folders not yet done), so both agree on what "complete" means.
No Prefect imports: everything here is testable with plain files.

One inbox feeds one shared OUT dataset. Why shared rather than OUT/<folder>/: the idempotency index in
`pipeline/store/parquet.py` works per OUT dir, so a document uploaded twice in two folders is extracted once, and the
failure queue and `retry-failures` see a single dataset. `runs/<run_id>.json` records each run's input folder,
so every row can still be traced back to its upload folder.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipeline.datamodel import SkipReason
from pipeline.ingest.discover import skip_reason, walk
from pipeline.masking import redact
from pipeline.store.atomic import write_json_atomic
from pipeline.store.parquet import RUNS, readable_path, run_input_dir

DEFAULT_MARKER = "_READY"
STATE_DIR = "state"  # where the ledger was kept before it moved to OUT/sources/ (still read)
LEDGER_NAME = "folders.json"
LEDGER_DIR = "sources"  # the ledger names folders exactly: personal data, like OUT/sources/<run>.json


def read_json(path: Path, default: Any) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else default


def upload_folders(root: Path) -> list[Path]:
    """Direct, non-hidden subfolders of the inbox, sorted: each is one upload."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def upload_folder_of(root: Path, path: Path) -> Path | None:
    """The upload folder a changed path belongs to (None for files directly in the root or hidden folders)."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        return None
    if len(rel.parts) < 1 or rel.parts[0].startswith("."):
        return None
    folder = root / rel.parts[0]
    return folder if len(rel.parts) > 1 or folder.is_dir() else None


@dataclass(frozen=True)
class Completion:
    """When an upload folder counts as complete.

    The marker file is authoritative (the uploader says it is done). Without a marker, `quiet_seconds`
    (None = marker only) of no change counts as done, but never while an in-progress file (`*.part`,
    `*.tmp`, ...) is present. "No change" uses ctime as well as mtime because copy tools that preserve
    mtimes (`rsync -a`, `cp -p`) would otherwise make a fresh upload look old.
    """

    marker: str = DEFAULT_MARKER
    quiet_seconds: float | None = None

    def has_marker(self, folder: Path) -> bool:
        return (folder / self.marker).is_file()

    def last_change(self, folder: Path) -> float | None:
        """Newest ctime/mtime below the folder, or None while an in-progress file is present."""
        newest = _changed_at(folder)
        for path in walk(folder):
            if skip_reason(path.name) == SkipReason.IN_PROGRESS:
                return None
            newest = max(newest, _changed_at(path))
        return newest

    def is_complete(self, folder: Path, now: float) -> bool:
        if self.has_marker(folder):
            return True
        if self.quiet_seconds is None:
            return False
        changed = self.last_change(folder)
        return changed is not None and now - changed >= self.quiet_seconds


def _changed_at(path: Path) -> float:
    try:
        st = path.lstat()
    except FileNotFoundError:  # deleted while we looked: the folder is still changing
        return time.time()
    return max(st.st_mtime, st.st_ctime)


def is_text(name: str) -> bool:
    """The name is valid UTF-8 on disk (Python keeps other bytes as lone surrogates, which JSON cannot carry, so
    no event or flow parameter can name such a folder)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def folder_key(folder: Path) -> str:
    """Folders are identified by their resolved absolute path (the event and flow runs carry a reference to it instead, `pipeline.ingest.sources`)."""
    return str(folder.resolve())


@dataclass
class FolderLedger:
    """`OUT/sources/folders.json`: upload folders already processed into OUT, with the run that did it (their
    exact paths, which can hold ID numbers: kept with OUT's other personal data; a ledger in the older place,
    `OUT/state/`, is read and moved on the next write).

    Written only after a folder's outputs (Parquet parts and `runs/<run_id>.json`) exist, atomically. One
    writer at a time: the `nightly` deployment has a concurrency limit of 1.
    """

    out_dir: Path
    done: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return self.out_dir / LEDGER_DIR / LEDGER_NAME

    @classmethod
    def load(cls, out_dir: Path) -> FolderLedger:
        ledger = cls(out_dir)
        older = out_dir / STATE_DIR / LEDGER_NAME
        ledger.done = read_json(ledger.path if ledger.path.exists() else older, {}).get("done", {})
        return ledger

    def is_done(self, folder: Path) -> bool:
        return folder_key(folder) in self.done

    def mark_done(self, folder: Path, run_id: str, via: str) -> None:
        self.done[folder_key(folder)] = {"run_id": run_id, "via": via,
                                         "done_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        write_json_atomic(self.path, {"done": self.done})
        (self.out_dir / STATE_DIR / LEDGER_NAME).unlink(missing_ok=True)


def folders_done_by_runs(out_dir: Path) -> dict[str, str]:
    """Folder key -> run id, for every finished extract run in OUT whose documents were all accounted for.

    This is how folders processed by an `on-upload` run (which knows nothing about the ledger) are seen as
    done by `nightly`: `runs/<run_id>.json` is written only after the run's outputs. One small JSON per run;
    reading them all takes well under a second even after a year of nightly runs.
    """
    done: dict[str, str] = {}
    for path in sorted((out_dir / RUNS).glob("*.json"), key=lambda p: p.stat().st_mtime):
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):  # a run summary being replaced right now
            continue
        folder = run_input_dir(summary, out_dir) if summary.get("input_dir") else None
        if folder is not None and summary.get("accounted"):
            done[folder_key(folder)] = str(summary["run_id"])
    return done


@dataclass
class NightlyPlan:
    """What a nightly run will do with each upload folder, and why (shown as an artifact)."""

    todo: list[Path] = field(default_factory=list)
    already_done: list[Path] = field(default_factory=list)
    incomplete: list[Path] = field(default_factory=list)
    in_flight: list[Path] = field(default_factory=list)


def plan_nightly(inbox: Path, ledger: FolderLedger, completion: Completion, in_flight: set[str],
                 now: float | None = None) -> NightlyPlan:
    """Sort the inbox's upload folders; folders finished by other runs are recorded in the ledger first."""
    for key, run_id in folders_done_by_runs(ledger.out_dir).items():
        if key not in ledger.done:
            ledger.mark_done(Path(key), run_id, via="extract-run")
    now = time.time() if now is None else now
    plan = NightlyPlan()
    for folder in upload_folders(inbox):
        if ledger.is_done(folder):
            plan.already_done.append(folder)
        elif folder_key(folder) in in_flight:
            plan.in_flight.append(folder)
        elif completion.is_complete(folder, now):
            plan.todo.append(folder)
        else:
            plan.incomplete.append(folder)
    return plan


def nightly_markdown(plan: NightlyPlan, outcomes: dict[str, str]) -> str:
    """Markdown for the nightly run: one line per folder with what happened to it (folder names only, their
    document numbers masked: an artifact is no place for personal data)."""
    def shown(name: str) -> str:  # an artifact is JSON text: a name that is not UTF-8 is shown with `\xNN` escapes
        return redact(readable_path(name))

    lines = ["# idflow nightly", "", "| folder | outcome |", "|---|---|"]
    lines += [f"| `{shown(f.name)}` | {outcomes.get(folder_key(f), 'not finished')} |" for f in plan.todo]
    lines += [f"| `{shown(f.name)}` | already done |" for f in plan.already_done]
    lines += [f"| `{shown(f.name)}` | running elsewhere, left for the next run |" for f in plan.in_flight]
    lines += [f"| `{shown(f.name)}` | incomplete (no marker yet) |" for f in plan.incomplete]
    return "\n".join(lines)
