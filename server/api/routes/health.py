"""Liveness, readiness and Prometheus metrics, open without a token so probes and scrapers need no
secret. None reveals more than counts and the names of what is down.

``/healthz`` answers while the process serves HTTP (liveness: restart it if not);
``/healthz/ready`` answers 200 only while the tuning log's database is reachable and every
background loop (engine, trainer, local worker) runs, else 503 (readiness: send no work).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from autosched.errors import ServiceUnavailable
from autosched.log.leases import QueueMetrics
from autosched.protocol import HealthPublic
from autosched.server.api.deps import LeasesDep, LogDep

router = APIRouter(tags=["health"])

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


@router.get("/healthz")
def healthz() -> HealthPublic:
    """The server is up."""
    return HealthPublic()


@router.get("/healthz/ready")
def ready(request: Request, log: LogDep) -> HealthPublic:
    """The database answers and every background loop runs."""
    log.ping()  # DatabaseUnavailable: 503 with Retry-After
    stopped = [service.name for service in request.app.state.background if not service.alive]
    if stopped:
        raise ServiceUnavailable(f"background loops stopped: {', '.join(stopped)}")
    return HealthPublic()


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(leases: LeasesDep) -> PlainTextResponse:
    """Queue depth, leases, live workers, results per second and jobs by status."""
    return PlainTextResponse(prometheus_text(leases.metrics()), media_type=PROMETHEUS_TEXT)


def prometheus_text(metrics: QueueMetrics) -> str:
    """The metrics in Prometheus' text exposition format (all of them gauges)."""
    jobs = sorted(metrics.jobs_by_status.items())
    gauges: list[tuple[str, str, list[tuple[str, float]]]] = [
        ("queue_depth", "Candidates queued for a worker.", [("", metrics.queued)]),
        ("candidates_leased", "Candidates held by a lease.", [("", metrics.leased)]),
        ("leases_active", "Leases neither reported nor expired.", [("", metrics.active_leases)]),
        ("workers_alive", "Workers heard from recently.", [("", metrics.workers_alive)]),
        (
            "results_per_second",
            "Measurements stored per second, over the last minute.",
            [("", metrics.results_last_minute / 60)],
        ),
        ("jobs", "Tuning jobs by status.", [(f'{{status="{s}"}}', n) for s, n in jobs]),
    ]
    lines = []
    for name, help_text, samples in gauges:
        lines += [f"# HELP autosched_{name} {help_text}", f"# TYPE autosched_{name} gauge"]
        lines += [f"autosched_{name}{labels} {value}" for labels, value in samples]
    return "\n".join(lines) + "\n"
