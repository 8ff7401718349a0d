"""The flow on the OpenAI-compatible backend against a real chat server on loopback, the key coming from a
Prefect Secret block: results arrive, and the key is in no output file, artifact or log."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

from prefect.blocks.system import Secret

from tests.support.chat_server import VALID_ANSWER

KEY = "sk-block-key-7f3e9a1c5b2d8e6f"


def test_openai_backend_with_key_from_secret_block(prefect_api, serve, sample_dir: Path, tmp_path: Path,
                                                   monkeypatch, capfd) -> None:
    from prefect.client.orchestration import get_client

    from flows.extract import extract_folder

    server = serve()
    Secret(value=f"  {KEY}\n").save("idflow-test-key", overwrite=True)  # padded, as pasted from a console
    monkeypatch.delenv("TAOTOKEN_API_KEY", raising=False)
    monkeypatch.setenv("IDFLOW_OPENAI_KEY_BLOCK", "idflow-test-key")
    monkeypatch.setenv("TAOTOKEN_BASE_URL", server.base_url)
    monkeypatch.setenv("TAOTOKEN_MODEL", "test-vlm")
    inbox = tmp_path / "in"
    inbox.mkdir()
    for name in ("passport_td3.jpg", "cn_front.jpg", "broken.jpg"):
        shutil.copy(sample_dir / name, inbox / name)
    out = tmp_path / "out"

    summary = asyncio.run(extract_folder(str(inbox), str(out), backend="openai", concurrency=4))

    assert summary["accounted"] and (summary["results"], summary["failures"]) == (2, 1)
    assert summary["prompt_tokens"] > 0 and summary["completion_tokens"] > 0
    assert len(server.chat_requests()) == 2
    written = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert KEY.encode() not in written and VALID_ANSWER["id_number"].encode() in written

    async def artifacts_and_params() -> str:
        async with get_client() as client:
            arts = [a.data for a in await client.read_artifacts()]
            runs = [r.parameters for r in await client.read_flow_runs()]
            return json.dumps([arts, runs], default=str)

    assert KEY not in asyncio.run(artifacts_and_params())
    captured = capfd.readouterr()
    assert KEY not in captured.out + captured.err
