"""`idflow watch`: announce each complete upload folder once, as the Prefect event `idflow.upload.ready`.

Why a watcher at all: open-source Prefect has no filesystem sensor, so something must turn "a folder landed"
into an event that the `on-upload` deployment trigger reacts to (and that shows in the Event Feed).

Delivery: the state file records a folder only after the server accepted its event (HTTP 204), so a folder is
never missed; if the process dies between the two, the event is sent again on restart with the same event id,
and the server's trigger evaluation drops an event id it has already seen, so no second run starts. Filesystem
events only say "look now": a periodic rescan of the root (cheap: one listdir and a marker stat per pending
folder) also catches folders created before start, while stopped, or lost to an inotify queue overflow.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from pipeline.ingest.inbox import Completion, folder_key, is_text, read_json, upload_folder_of, upload_folders
from pipeline.ingest.sources import folder_reference
from pipeline.masking import redact
from pipeline.store.atomic import write_json_atomic
from pipeline.store.parquet import readable_path

UPLOAD_EVENT = "idflow.upload.ready"
RESOURCE_PREFIX = "idflow.upload."
STATE_NAME = ".idflow-watch.json"
_EVENT_NAMESPACE = uuid.UUID("5c1f0e7e-8a51-4d8e-9a37-1d7b0c4f2a61")

log = logging.getLogger("idflow.watch")

Emit = Callable[[Path], None]
"""Announce one complete folder; raise if it was not delivered (the folder is then tried again later)."""


def event_id(reference: str) -> uuid.UUID:
    """The same folder (its reference, `pipeline.ingest.sources.folder_reference`) always gets the same event id, so a
    re-send after a crash is recognised as a repeat."""
    return uuid.uuid5(_EVENT_NAMESPACE, reference)


@dataclass
class UploadWatcher:
    """Decides when to announce which folder; knows nothing about watchfiles or Prefect (both injected)."""

    root: Path
    emit: Emit
    completion: Completion = field(default_factory=Completion)
    state_path: Path | None = None  # default: ROOT/.idflow-watch.json (hidden, so never an upload itself)
    rescan_seconds: float = 30.0
    clock: Callable[[], float] = time.time
    announced: dict[str, dict[str, str]] = field(default_factory=dict)
    _due: dict[str, float] = field(default_factory=dict)  # pending folder -> when to test its quiet period
    _last_rescan: float = float("-inf")
    _unnamed: set[str] = field(default_factory=set)  # folders whose name an event cannot carry (said once)

    def __post_init__(self) -> None:
        self.root = self.root.resolve()
        if self.state_path is None:
            self.state_path = self.root / STATE_NAME
        self.announced = read_json(self.state_path, {}).get("announced", {})

    def on_changes(self, paths: Iterable[Path]) -> None:
        """Filesystem changes: a folder with its marker is announced now, others restart their quiet period."""
        now = self.clock()
        for folder in sorted({f for p in paths if (f := upload_folder_of(self.root, Path(p))) is not None}):
            if folder.name in self.announced:
                continue
            if self.completion.has_marker(folder):
                self._check(folder, now)
            elif self.completion.quiet_seconds is not None:
                self._due[folder.name] = now + self.completion.quiet_seconds

    def tick(self) -> None:
        """Periodic: rescan the root when due, then test folders whose quiet period may have run out."""
        now = self.clock()
        if now - self._last_rescan >= self.rescan_seconds:
            self._last_rescan = now
            for folder in upload_folders(self.root):
                if folder.name in self.announced:
                    continue
                if self.completion.has_marker(folder):
                    self._check(folder, now)
                elif self.completion.quiet_seconds is not None:
                    self._due.setdefault(folder.name, now)  # unknown history: judge by ctime/mtime now
        for name, due in sorted(self._due.items()):
            if due <= now:
                self._check(self.root / name, now)

    def _check(self, folder: Path, now: float) -> None:
        """Announce the folder if it is complete, else schedule its next test (if quiet periods are on)."""
        self._due.pop(folder.name, None)
        if not folder.is_dir() or folder.name in self._unnamed:
            return
        if not is_text(folder.name):  # an event and a flow parameter are text: it could never be announced
            self._unnamed.add(folder.name)
            log.warning("upload folder %s is not announced: its name is not UTF-8; rename it", readable_path(folder.name))
            return
        if not self.completion.is_complete(folder, now):
            if self.completion.quiet_seconds is not None:
                self._due[folder.name] = now + self.completion.quiet_seconds
            return
        try:
            self.emit(folder)
        except Exception as exc:  # server down: keep it pending, a later tick tries again
            log.warning("could not announce upload folder %s (%s); will retry", folder.name, type(exc).__name__)
            self._due[folder.name] = now + self.rescan_seconds
            return
        self.announced[folder.name] = {"path": folder_key(folder),
                                       "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        assert self.state_path is not None
        write_json_atomic(self.state_path, {"announced": self.announced})
        log.info("announced upload folder %s", folder.name)


def run(watcher: UploadWatcher, *, tick_seconds: float = 1.0, stop_event: threading.Event | None = None) -> None:
    """Watch until stopped. The first tick runs right after the OS watch is set up, so nothing created in
    between is missed."""
    import watchfiles

    watcher.root.mkdir(parents=True, exist_ok=True)
    try:
        for changes in watchfiles.watch(watcher.root, stop_event=stop_event, yield_on_timeout=True,
                                        rust_timeout=max(1, int(tick_seconds * 1000)), debounce=200):
            watcher.on_changes(Path(p) for _, p in changes)
            watcher.tick()
    except RuntimeError as exc:  # watchfiles gives up on a path it cannot decode (a name that is not UTF-8)
        log.warning("file-system events unavailable (%s): rescanning %s every %g s instead",
                    " ".join(str(exc).split()), watcher.root, watcher.rescan_seconds)
        stop = stop_event or threading.Event()
        while not stop.is_set():
            watcher.tick()
            stop.wait(tick_seconds)


def prefect_emitter(out_dir: Path) -> Emit:
    """An `Emit` that POSTs `idflow.upload.ready` to the Prefect API and waits for it to be accepted.

    The event carries the folder masked (`path`, for the Event Feed) and the reference the on-upload run resolves
    from `out_dir` (`ref`, `pipeline.ingest.sources.folder_reference`): a folder's name can hold an ID number, and an
    event's payload becomes the flow run's parameters. A plain HTTP POST rather than `emit_event`, whose
    background sender gives no delivery confirmation.
    """
    from prefect.client.orchestration import get_client
    from prefect.events import Event

    def emit(folder: Path) -> None:
        reference = folder_reference(out_dir, folder)
        event = Event(event=UPLOAD_EVENT, id=event_id(reference),
                      resource={"prefect.resource.id": f"{RESOURCE_PREFIX}{reference.rpartition(':')[2]}",
                                "prefect.resource.name": redact(folder.name)},
                      payload={"path": redact(folder_key(folder)), "ref": reference})
        with get_client(sync_client=True) as client:
            client.request("POST", "/events", json=[event.model_dump(mode="json")]).raise_for_status()

    return emit
