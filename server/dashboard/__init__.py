"""The web dashboard: static files (HTML, CSS and JavaScript modules, no build step) served at ``/``
and ``/static/`` under a Content-Security-Policy that forbids inline script.

The page reads and acts on the service through the REST API alone, with the client token its user
gives it; nothing here reads the tuning log.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

STATIC = Path(__file__).parent / "static"
# What index.html says of auth; a server without auth says "none", and the page asks no token.
_WANTS_TOKEN = '<meta name="autosched-auth" content="bearer">'

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-cache",  # revalidated: a new version of the page is seen at once
}


class _DashboardFiles(StaticFiles):
    """The page's assets, each with the dashboard's security headers."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(SECURITY_HEADERS)
        return response


def mount_dashboard(app: FastAPI, *, no_auth: bool) -> None:
    """Serve the dashboard's page at ``/`` and its assets under ``/static/``.

    The page says whether the server wants a token (``no_auth``), so that it asks for one
    without a refused request first.
    """
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    if no_auth:
        page = page.replace(_WANTS_TOKEN, _WANTS_TOKEN.replace("bearer", "none"))

    @app.get("/", include_in_schema=False)
    def dashboard() -> HTMLResponse:
        return HTMLResponse(page, headers=SECURITY_HEADERS)

    app.mount("/static", _DashboardFiles(directory=STATIC), name="static")
