"""Every admin API body leaves through here: JSON, with credential-shaped strings redacted (an
error may quote a state backend URL with its password; a stored argument may hold a token)."""

from __future__ import annotations

import orjson
from aiohttp import web

from sidecar.telemetry.redact import redact


def json_response(data: object, status: int = 200) -> web.Response:
    # Shape-based only: key-based redaction would blank schema properties named `password`
    # (the tool inventory) that are names, not secrets; arguments were key-redacted when stored.
    body = orjson.dumps(redact(data, ()))
    return web.Response(body=body, status=status, content_type="application/json")
