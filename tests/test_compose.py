"""docker-compose.yml and the Dockerfile: the services, their wiring, and that every command they
run is a real `autosched` command with real options (no Docker needed).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import autosched

ROOT = Path(__file__).resolve().parent.parent
VARIABLE = re.compile(r"\$\{(\w+)(?::?[-?][^}]*)?\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def _required(value: str) -> list[str]:
    """The variables ``value`` takes from the environment, each required (``${NAME:?...}``)."""
    names = []
    for match in VARIABLE.finditer(value):
        assert ":?" in match.group(0), f"{match.group(0)} has a default; secrets must be set"
        names.append(match.group(1))
    return names


def test_the_services_and_the_postgres_volume(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"postgres", "server", "cpu-worker", "gpu-worker"}
    postgres = services["postgres"]
    assert postgres["image"].startswith("postgres:")
    (volume,) = postgres["volumes"]
    name, path = volume.split(":")
    assert name in compose["volumes"] and path == "/var/lib/postgresql/data"
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    assert _required(postgres["environment"]["POSTGRES_PASSWORD"]) == ["POSTGRES_PASSWORD"]


def test_the_server_runs_on_postgres_once_it_is_healthy(compose: dict[str, Any]) -> None:
    server = compose["services"]["server"]
    assert server["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    environment = server["environment"]
    assert environment["AUTOSCHED_DB"].startswith("postgresql+psycopg://autosched:")
    assert environment["AUTOSCHED_DB"].endswith("@postgres:5432/autosched")
    assert _required(environment["AUTOSCHED_CLIENT_TOKEN"]) == ["AUTOSCHED_CLIENT_TOKEN"]
    assert _required(environment["AUTOSCHED_WORKER_TOKEN"]) == ["AUTOSCHED_WORKER_TOKEN"]
    assert "/healthz" in " ".join(server["healthcheck"]["test"])
    assert any(port.endswith(":8000") for port in server["ports"])


def test_workers_pull_from_the_server_and_scale(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("cpu-worker", "gpu-worker"):
        worker = services[name]
        assert worker["depends_on"] == {"server": {"condition": "service_healthy"}}
        assert worker["environment"]["AUTOSCHED_SERVER"] == "http://server:8000"
        token = worker["environment"]["AUTOSCHED_WORKER_TOKEN"]
        assert _required(token) == ["AUTOSCHED_WORKER_TOKEN"]
    cpu = services["cpu-worker"]
    # `--scale cpu-worker=N` needs replicas without a fixed name or host port.
    assert "container_name" not in cpu and "ports" not in cpu
    assert "profiles" not in cpu


def test_the_gpu_worker_has_a_profile_and_an_nvidia_device(compose: dict[str, Any]) -> None:
    gpu = compose["services"]["gpu-worker"]
    assert gpu["profiles"] == ["gpu"]
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert gpu["build"]["target"] == "gpu"


def test_images_are_built_from_stages_of_the_dockerfile(
    compose: dict[str, Any], dockerfile: str
) -> None:
    stages = set(re.findall(r"^FROM \S+ AS (\w+)$", dockerfile, flags=re.MULTILINE))
    for name, service in compose["services"].items():
        if name != "postgres":
            assert service["build"]["context"] == "."
            assert service["build"]["target"] in stages
    assert dockerfile.count('ENTRYPOINT ["autosched"]') == len(stages)


@pytest.mark.slow
def test_every_command_is_a_real_autosched_command(compose: dict[str, Any]) -> None:
    """Each command is run as the image would (`autosched ARGS`) with --help: click refuses an
    unknown command or option before it prints the help."""
    commands = [
        service["command"] for name, service in compose["services"].items() if name != "postgres"
    ]
    assert len(commands) == 3
    for service in compose["services"].values():
        assert "entrypoint" not in service
    for command in commands:
        result = autosched(*command, "--help", cwd=ROOT)
        assert "Usage:" in result.stdout


def test_the_server_image_reads_onnx_uploads(dockerfile: str) -> None:
    cpu_stage = dockerfile.split("FROM ")[1]
    assert cpu_stage.startswith("python:") and 'pip install ".[models]"' in cpu_stage
