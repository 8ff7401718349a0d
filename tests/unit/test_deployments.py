"""The deployments are declared twice, for two ways of running them: `idflow serve` (flows/deployments.py) and
`prefect deploy` with a process work pool (deployments/prefect.yaml). This test is what keeps them one
declaration: every served deployment appears in the YAML with the same entrypoint, parameters, schedule,
concurrency limit, trigger and description, once the YAML's `{{ $VAR }}` placeholders are filled in."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from flows.deployments import build_deployments
from pipeline.settings import ScheduleSettings
from tests.support.paths import REPO

ENV = {"IDFLOW_INBOX": "/srv/inbox", "IDFLOW_OUT": "/srv/out", "IDFLOW_BACKEND": "ocr",
       "IDFLOW_TIMEZONE": "Europe/Berlin", "PWD": str(REPO)}
WORK_POOL_ONLY = {"shard", "sharded"}  # started by `extract-sharded` on workers; nothing to serve locally


def _fill(value: Any) -> Any:
    """`prefect deploy`'s `{{ $VAR }}` substitution (done at deploy time); `{{ event.* }}` stays for triggers."""
    if isinstance(value, str):
        return re.sub(r"\{\{\s*\$(\w+)\s*\}\}", lambda m: ENV[m.group(1)], value)
    if isinstance(value, list):
        return [_fill(v) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def declared() -> dict[str, dict[str, Any]]:
    data = yaml.safe_load((REPO / "deployments" / "prefect.yaml").read_text(encoding="utf-8"))
    return {d["name"]: _fill(d) for d in data["deployments"]}


@pytest.fixture(scope="module")
def served() -> dict[str, Any]:
    deployments = build_deployments(inbox=ENV["IDFLOW_INBOX"], out_dir=ENV["IDFLOW_OUT"],
                                    backend=ENV["IDFLOW_BACKEND"], model="m",
                                    schedule=ScheduleSettings(timezone=ENV["IDFLOW_TIMEZONE"]))
    return {d.name: d for d in deployments}


def test_every_served_deployment_is_in_the_yaml_and_nothing_else(declared, served) -> None:
    assert set(served) == set(declared) - WORK_POOL_ONLY


def test_same_entrypoint_parameters_limit_and_description(declared, served) -> None:
    for name, dep in served.items():
        yml = declared[name]
        assert yml["entrypoint"] == dep.entrypoint, name
        assert yml["parameters"] == dep.parameters, name
        assert yml.get("concurrency_limit") == dep.concurrency_limit, name
        assert yml["description"] == dep.description, name
        assert set(yml["tags"]) <= set(dep.tags), name


def test_same_schedules(declared, served) -> None:
    defaults = {"nightly": ScheduleSettings.model_fields["nightly_cron"].default,
                "retry-failures": ScheduleSettings.model_fields["retry_cron"].default}
    for name, dep in served.items():
        code = [(s.schedule.cron, s.schedule.timezone) for s in dep.schedules or []]
        yml = [(s["cron"], s["timezone"]) for s in declared[name].get("schedules", [])]
        assert code == yml, name
        assert code == ([(defaults[name], ENV["IDFLOW_TIMEZONE"])] if name in defaults else []), name


def test_same_upload_trigger(declared, served) -> None:
    for name, dep in served.items():
        code = [{"name": t.name, "expect": sorted(t.expect), "match": t.match.model_dump(), "parameters": t.parameters}
                for t in dep.triggers or []]
        yml = [{"name": t["name"], "expect": sorted(t["expect"]), "match": t["match"], "parameters": t["parameters"]}
               for t in declared[name].get("triggers", [])]
        assert code == yml, name
