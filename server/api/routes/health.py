"""Liveness and Prometheus metrics, open without a token so probes and scrapers need no secret.

Neither reveals more than counts.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from autosched.log.leases import QueueMetrics
from autosched.protocol import HealthPublic
from autosched.server.api.deps import LeasesDep

router = APIRouter(tags=["health"])

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


@router.get("/healthz")
def healthz() -> HealthPublic:
    """The server is up."""
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
