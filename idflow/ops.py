"""`idflow serve`, `idflow watch` and `idflow stop-server`: the operations commands, registered onto the `idflow`
app.

`serve` and `watch` need a real Prefect server (`PREFECT_API_URL`): the local server runs share when none is
configured has no scheduler and no trigger evaluation, so nothing would ever run. `ui` keeps that local server up
with Prefect's UI, to browse runs; `stop-server` stops it now instead of after its idle time.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Annotated, Optional

import typer

from idflow.common import config_error, console, load_settings
from pipeline.extract.registry import BACKEND_NAMES, choices, model_name
from pipeline.ingest.inbox import DEFAULT_MARKER, Completion

InboxOption = Annotated[Optional[Path], typer.Option("--inbox", envvar="IDFLOW_INBOX",
                                                     help="upload root: one subfolder per upload")]


def _require_server() -> str:
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise config_error("PREFECT_API_URL is not set: start `prefect server start` and "
                           "`prefect config set PREFECT_API_URL=http://127.0.0.1:4200/api`")
    return url


def _existing_dir(path: Optional[Path], what: str) -> Path:
    if path is None:
        raise config_error(f"no {what} given (option or IDFLOW_INBOX)")
    if not path.is_dir():
        raise config_error(f"{what} {path} does not exist or is not a folder")
    return path.resolve()


def serve(
    inbox: InboxOption = None,
    out: Annotated[Path, typer.Option("--out", "-o", envvar="IDFLOW_OUT",
                                      help="shared output dataset of all runs")] = Path("out"),
    backend: Annotated[Optional[str], typer.Option(help=choices(BACKEND_NAMES))] = None,
    request_limit: Annotated[int, typer.Option(
        min=1, help="model requests in flight across all runs (global concurrency limit, created if missing)")] = 8,
    limit: Annotated[Optional[int], typer.Option(min=1, help="flow runs at once in this process")] = None,
) -> None:
    """Serve the on-upload, nightly and retry-failures deployments from this process (no work pool needed)."""
    from prefect import serve as prefect_serve

    from flows.deployments import build_deployments
    from flows.limits import ensure_request_limit, request_limit_name

    settings = load_settings(backend=backend)
    root = _existing_dir(inbox, "inbox")
    if request_limit < settings.concurrency:
        raise config_error(f"--request-limit {request_limit} is below IDFLOW_CONCURRENCY {settings.concurrency}: "
                           "a batch could never get its slots")
    api = _require_server()
    out_dir = out.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    created = asyncio.run(ensure_request_limit(settings.backend, request_limit))
    console.print(f"concurrency limit {request_limit_name(settings.backend)}: "
                  f"{'created with ' + str(request_limit) + ' slots' if created else 'exists, left as is'}")
    console.print(f"serving on-upload, nightly, retry-failures against {api}: inbox {root}, output {out_dir}")
    prefect_serve(*build_deployments(inbox=str(root), out_dir=str(out_dir), backend=settings.backend,
                                     model=model_name(settings), schedule=settings.schedule), limit=limit)


def watch(
    root: Annotated[Optional[Path], typer.Argument(envvar="IDFLOW_INBOX",
                                                   help="upload root (default: IDFLOW_INBOX)")] = None,
    marker: Annotated[str, typer.Option(help="file that marks an upload folder complete")] = DEFAULT_MARKER,
    quiet: Annotated[Optional[float], typer.Option(
        min=1, help="also complete after this many seconds without change (default: marker only)")] = None,
    state: Annotated[Optional[Path], typer.Option(help="state file (default: ROOT/.idflow-watch.json)")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", envvar="IDFLOW_OUT",
                                      help="the output dataset `idflow serve` writes (folder references go "
                                           "into OUT/sources/)")] = Path("out"),
) -> None:
    """Emit `idflow.upload.ready` once per complete upload folder under ROOT (marker or quiet period); the event
    names the folder by a reference kept in OUT, never by its path (which can hold an ID number)."""
    from flows.watch import UploadWatcher, prefect_emitter, run
    from pipeline.masking import install_masking

    folder = _existing_dir(root, "upload root")
    _require_server()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    install_masking()  # folder names can hold document numbers
    out_dir = out.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    watcher = UploadWatcher(folder, prefect_emitter(out_dir), Completion(marker, quiet), state_path=state)
    typer.echo(f"watching {folder} for complete upload folders (marker {marker}"
               f"{f', or {quiet:g} s quiet' if quiet else ''}); state in {watcher.state_path}")
    try:
        run(watcher)
    except KeyboardInterrupt:
        pass


def stop_server(force: Annotated[bool, typer.Option("--force", help="stop it even while runs use it (they fail)")]
                = False) -> None:
    """Stop the local Prefect server that runs without PREFECT_API_URL share (it otherwise stops by itself
    IDFLOW_PREFECT_SERVER_IDLE_S after the last run); refused while runs use it, unless --force."""
    from flows.local_server import ServerInUse, stop_shared_server

    try:
        pid = stop_shared_server(force)
    except ServerInUse as exc:
        raise config_error(str(exc)) from None
    console.print(f"asked the local Prefect server (pid {pid}) to stop" if pid else "no local Prefect server runs")


def ui() -> None:
    """Keep a local Prefect server with its UI up, to browse the runs of this Prefect home (earlier ones too),
    until Ctrl-C; it then stops after its idle time like after a run. With PREFECT_API_URL set: where that
    server's UI is."""
    import signal
    import threading

    from idflow.common import prefect_api

    with prefect_api(ui=True) as ready:
        api = ready()
        if not api.local:
            console.print(f"the configured Prefect API's UI: {api.ui or 'unknown (set PREFECT_UI_URL)'}",
                          markup=False)
            return
        console.print(f"Prefect UI: {api.ui} (the runs of this Prefect home; Ctrl-C to let the server go: it stops "
                      f"{api.idle_s:g} s after the last run ends)", markup=False, soft_wrap=True)
        stop = threading.Event()
        previous = signal.signal(signal.SIGTERM, lambda number, frame: stop.set())
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)


def register(app: typer.Typer) -> None:
    """Add `serve`, `watch`, `ui` and `stop-server` to the `idflow` app (called from idflow/cli.py)."""
    app.command()(serve)
    app.command()(watch)
    app.command()(ui)
    app.command("stop-server")(stop_server)
