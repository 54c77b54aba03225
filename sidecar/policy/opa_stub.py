"""A TEST DOUBLE for an OPA server: OPA's REST Data API served over the embedded engine.

No `opa` binary is available in CI, so the OPA engine (HTTP client side) is tested against
this: `POST /v1/data/<path>` with `{"input": …}` answers `{"result": …}`, or `{}` when the
rule is undefined, like OPA. It is not OPA: the Rego is evaluated by regorus. Knobs
simulate a slow or failing server. Also usable by hand: `python -m sidecar.policy.opa_stub
example:support 8181` (a policy spec: a directory, `builtin` or `example:NAME`).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import orjson
from aiohttp import web

from sidecar.policy._regorus import UNDEFINED, Engine, is_fatal
from sidecar.policy.loader import compile_bundle, read_bundle

STATE: web.AppKey[dict[str, Any]] = web.AppKey("opa_stub_state", dict)


def make_app(
    policies_dir: str,
    *,
    token: str | None = None,
    delay_s: float = 0.0,
    fail_status: int | None = None,
) -> web.Application:
    """The stub app. Policies are compiled at startup, on the serving loop's thread."""
    app = web.Application()
    app[STATE] = {
        "dir": policies_dir,
        "token": token,
        "delay_s": delay_s,
        "fail_status": fail_status,
        "engine": None,
        "requests": 0,
    }

    async def startup(app: web.Application) -> None:
        app[STATE]["engine"] = compile_bundle(read_bundle(policies_dir)).engine

    app.on_startup.append(startup)
    app.router.add_post("/v1/data/{path:.*}", _data)
    app.router.add_get("/health", _health)
    return app


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


async def _health(request: web.Request) -> web.Response:
    return _json({})


async def _data(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state["requests"] += 1
    if state["token"] and request.headers.get("Authorization") != f"Bearer {state['token']}":
        return _json({"code": "unauthorized", "message": "missing or invalid bearer token"}, 401)
    if state["delay_s"]:
        await asyncio.sleep(state["delay_s"])
    if state["fail_status"]:
        return _json({"code": "internal_error", "message": "stub failure"}, state["fail_status"])
    try:
        payload = orjson.loads(await request.read() or b"{}")
    except orjson.JSONDecodeError:
        return _json({"code": "invalid_parameter", "message": "body is not JSON"}, 400)
    rule = "data." + ".".join(p for p in request.match_info["path"].split("/") if p)
    engine: Engine = state["engine"]
    try:
        engine.set_input(payload.get("input"))
        value = engine.eval_rule(rule)
    except BaseException as exc:
        if is_fatal(exc):
            raise
        return _json({"code": "internal_error", "message": str(exc)}, 500)
    return _json({} if value is UNDEFINED else {"result": value})


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    directory = args[0] if args else "example:support"
    port = int(args[1]) if len(args) > 1 else 8181
    web.run_app(make_app(directory), host="127.0.0.1", port=port)


if __name__ == "__main__":
    main()
