"""`idflow doctor` diagnoses, each triggered against the loopback chat server."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Callable

import pytest

from pipeline.ops.doctor import DoctorReport, doctor
from pipeline.settings import OpenAISettings, PrepareSettings
from tests.support.chat_server import ChatServer

KEY = "sk-doctor-5e8b1f2a9c7d3e40"


def check(base_url: str, *, key: str | None = KEY, model: str = "test-vlm", environ: dict[str, str] | None = None,
          env_file: Path | str = "/nonexistent/.env", **settings: Any) -> DoctorReport:
    values: dict[str, Any] = dict(base_url=base_url, api_key=key, model=model, timeout_s=2.0, max_attempts=1)
    report = doctor(OpenAISettings(**{**values, **settings}), environ={"TAOTOKEN_API_KEY": key or ""}
                    if environ is None else environ, env_file=env_file, prepare=PrepareSettings())
    text = "\n".join(report.lines())
    assert KEY not in text and (key is None or key.strip() not in text)
    return report


def failed(report: DoctorReport) -> tuple[str, str, str]:
    """(name, detail, fix) of the failing step, which must be the last one run."""
    step = report.steps[-1]
    assert not step.ok and not report.ok and report.exit_code == 1
    assert all(s.ok for s in report.steps[:-1])
    return step.name, step.detail, step.fix or ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_all_three_steps_pass(serve: Callable[..., ChatServer]) -> None:
    server = serve()
    report = check(server.base_url)
    assert [s.name for s in report.steps] == ["text ping", "image arrives", "sample document"]
    assert report.ok and report.exit_code == 0
    assert "+62" in report.steps[1].detail  # 320x192 probe = 60 visual tokens + 2
    assert len(server.chat_requests()) == 3


def test_doubled_v1_is_diagnosed_with_the_working_url(serve: Callable[..., ChatServer]) -> None:
    server = serve(base_path="")  # like https://taotoken.net/api
    name, detail, fix = failed(check(server.base_url + "/v1"))
    assert name == "text ping" and "404" in detail
    assert fix == f"set TAOTOKEN_BASE_URL={server.base_url}"


def test_missing_v1_is_diagnosed_with_the_working_url(serve: Callable[..., ChatServer]) -> None:
    server = serve(base_path="/v1")  # like vLLM
    name, detail, fix = failed(check(f"http://127.0.0.1:{server.port}"))
    assert "404" in detail and fix == f"set TAOTOKEN_BASE_URL=http://127.0.0.1:{server.port}/v1"


def test_chat_completions_in_base_url(serve: Callable[..., ChatServer]) -> None:
    server = serve(base_path="/v1")
    _, _, fix = failed(check(server.base_url + "/chat/completions"))
    assert fix == f"set TAOTOKEN_BASE_URL={server.base_url}"


def test_unset_key_says_where_it_was_looked_for(serve: Callable[..., ChatServer]) -> None:
    server = serve()
    name, detail, fix = failed(check(server.base_url, key=None, environ={}))
    assert name == "text ping" and "neither in the environment nor in .env" in detail
    assert "TAOTOKEN_API_KEY" in fix and server.requests == []


def test_rejected_padded_key_from_environment(serve: Callable[..., ChatServer]) -> None:
    server = serve()
    stale = " sk-stale-1234567890abcdef\n"
    _, detail, fix = failed(check(server.base_url, key=stale, environ={"TAOTOKEN_API_KEY": stale}))
    assert "401" in detail
    assert "environment (TAOTOKEN_API_KEY)" in fix and "whitespace" in fix and "stale" in fix


def test_rejected_key_from_dotenv(serve: Callable[..., ChatServer], tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    server = serve()
    env_file = tmp_path / ".env"
    stale = "sk-old-key-from-dotenv-000"  # a fake, stale key the test server rejects
    env_file.write_text("TAOTOKEN_API_KEY=" + stale + "\n")
    for var in ("TAOTOKEN_API_KEY", "IDFLOW_OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    settings = OpenAISettings(_env_file=env_file, base_url=server.base_url, model="test-vlm")  # type: ignore[call-arg]
    report = doctor(settings, environ={}, env_file=env_file)
    _, _, fix = failed(report)
    assert "the key in the .env (TAOTOKEN_API_KEY)" in fix
    assert "sk-old-key-from-dotenv-000" not in "\n".join(report.lines())


def test_environment_shadowing_dotenv(serve: Callable[..., ChatServer], tmp_path: Path) -> None:
    server = serve()
    env_file = tmp_path / ".env"
    env_file.write_text(f"TAOTOKEN_API_KEY={KEY}\n")
    _, _, fix = failed(check(server.base_url, key="sk-exported-long-ago-0000", env_file=env_file,
                             environ={"TAOTOKEN_API_KEY": "sk-exported-long-ago-0000"}))
    assert "overrides a different value in .env" in fix


def test_unknown_model_lists_offered_models_and_port_holder(serve: Callable[..., ChatServer]) -> None:
    server = serve(models=["qwen3.5-vl-plus", "test-vlm"])
    _, detail, fix = failed(check(server.base_url, model="Qwen3.5-2B"))
    assert "does not exist" in detail
    assert "set TAOTOKEN_MODEL to one of: qwen3.5-vl-plus, test-vlm" in fix
    assert f"port {server.port}" in fix


def test_image_refused(serve: Callable[..., ChatServer]) -> None:
    server = serve(faults=["ok", "refuse_image"])
    name, detail, fix = failed(check(server.base_url))
    assert name == "image arrives" and "400" in detail
    assert "data:image/<type>;base64" in fix


def test_image_that_never_reaches_the_model(serve: Callable[..., ChatServer]) -> None:
    server = serve(count_image_tokens=False)
    name, detail, fix = failed(check(server.base_url))
    assert name == "image arrives" and "did not reach the model" in detail and "+0" in detail
    assert "vision-language" in fix


def test_image_too_large_suggests_resize_settings(serve: Callable[..., ChatServer]) -> None:
    server = serve(max_image_pixels=100_000)  # the 320x192 probe passes, the 640x416 sample does not
    name, detail, fix = failed(check(server.base_url))
    assert name == "sample document" and "too large" in detail.lower()
    assert "IDFLOW_MAX_PIXELS (now 1048576" in fix and "IDFLOW_MAX_LONG_EDGE" in fix


def test_sample_without_json_fails_step_three(serve: Callable[..., ChatServer]) -> None:
    server = serve(faults=["ok", "ok", "non_json", "non_json"])
    name, detail, fix = failed(check(server.base_url))
    assert name == "sample document" and detail.startswith("parse/no_json")
    assert "one repair request" in fix


def test_response_format_refusal_still_passes(serve: Callable[..., ChatServer]) -> None:
    report = check(serve(reject_response_format=True).base_url)
    assert report.ok and "instruction-only" in report.steps[2].detail


@pytest.mark.parametrize("fault", ["html", "content_number", "trickle"])
def test_an_endpoint_that_does_not_answer_with_a_completion(serve: Callable[..., ChatServer], fault: str) -> None:
    server = serve(default_fault=fault, trickle_s=0.05)
    name, detail, fix = failed(check(server.base_url, timeout_s=1.0))
    assert name == "text ping"
    if fault == "trickle":  # each byte quickly, the answer never: the request timeout still ends it
        assert "within the request timeout" in detail
    else:
        assert "is not a chat completion" in detail and "TAOTOKEN_BASE_URL" in fix


def test_connection_refused_on_a_local_port() -> None:
    port = free_port()
    name, detail, fix = failed(check(f"http://127.0.0.1:{port}/v1"))
    assert name == "text ping" and "connection refused" in detail
    assert f"start the local server (vllm serve ... --port {port})" in fix


def test_port_held_by_a_process_that_never_answers() -> None:
    with socket.socket() as holder:  # accepts connections (backlog) but never answers, like a stuck vLLM
        holder.bind(("127.0.0.1", 0))
        holder.listen(8)
        port = holder.getsockname()[1]
        name, detail, fix = failed(check(f"http://127.0.0.1:{port}/v1", timeout_s=0.5))
    assert name == "text ping" and "no answer" in detail
    assert "stuck vLLM may hold the port" in fix and f"sport = :{port}" in fix


def test_vllm_backend_checks_every_pool_endpoint_not_the_api(serve: Callable[..., ChatServer], monkeypatch,
                                                             tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from idflow.cli import app

    pool = [serve(base_path="/v1", model="pool-vlm") for _ in range(2)]
    api = serve(model="api-model")  # the OpenAI settings point here: it must not be asked
    monkeypatch.chdir(tmp_path)  # no .env
    monkeypatch.setenv("IDFLOW_VLLM_ENDPOINTS", ",".join(s.base_url for s in pool))
    monkeypatch.setenv("IDFLOW_VLLM_MODEL", "pool-vlm")
    monkeypatch.setenv("IDFLOW_VLLM_API_KEY", KEY)
    monkeypatch.setenv("TAOTOKEN_BASE_URL", api.base_url)
    monkeypatch.setenv("TAOTOKEN_API_KEY", KEY)
    monkeypatch.setenv("TAOTOKEN_MODEL", "api-model")
    result = CliRunner().invoke(app, ["doctor", "--backend", "vllm"])
    assert result.exit_code == 0, result.output
    assert [len(s.chat_requests()) for s in pool] == [3, 3] and api.requests == []
    assert all(s.base_url in result.output for s in pool) and KEY not in result.output

    monkeypatch.setenv("IDFLOW_VLLM_MODEL", "other-vlm")  # a model the servers do not serve
    result = CliRunner().invoke(app, ["doctor", "--backend", "vllm"])
    assert result.exit_code == 1
    assert "set IDFLOW_VLLM_MODEL to one of: pool-vlm" in " ".join(result.output.split())


def test_vllm_backend_without_endpoints_is_a_configuration_error(monkeypatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from idflow.cli import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("IDFLOW_VLLM_ENDPOINTS", raising=False)
    monkeypatch.setenv("IDFLOW_VLLM_API_KEY", KEY)
    monkeypatch.setenv("IDFLOW_VLLM_STATE_DIR", str(tmp_path / "state"))
    result = CliRunner().invoke(app, ["doctor", "--backend", "vllm"])
    assert result.exit_code == 2 and "IDFLOW_VLLM_ENDPOINTS" in result.output and KEY not in result.output
