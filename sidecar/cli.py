"""The `sidecar` command: run, demo, policy, approvals, rejections, status."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from sidecar import __version__
from sidecar.config import ConfigError, Settings, load_settings

# Subcommand modules each expose `register(subparsers)`; leaves set `func(args) -> int`.
Registrar = Callable[[Any], Any]


def _registrars() -> list[Registrar]:
    """Every subcommand module, imported outright: a broken import fails `sidecar` loudly
    instead of silently removing a subcommand."""
    from sidecar.admin.cli import register as approvals
    from sidecar.policy.cli import register as policy
    from sidecar.schemas.cli import register as schemas
    from sidecar.telemetry.rejections_cli import register as rejections
    from sidecar.telemetry.status_cli import register as status

    return [approvals, policy, rejections, schemas, status]


_LOG_LEVELS = ("debug", "info", "warning", "error")


def _add_run_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML settings file (default: none, built-in defaults)")
    parser.add_argument("--listen", metavar="HOST:PORT", help="proxy port (default 127.0.0.1:8080)")
    parser.add_argument("--admin-listen", metavar="HOST:PORT", help="admin port (default 127.0.0.1:9477)")
    parser.add_argument("--anthropic-upstream", metavar="URL", help="default https://api.anthropic.com")
    parser.add_argument("--openai-upstream", metavar="URL", help="default https://api.openai.com")
    parser.add_argument(
        "--policies", metavar="DIR", help="directory of Rego policies and data.json (default: the built-in policy)"
    )
    parser.add_argument("--admin-token-file", metavar="FILE", help="admin bearer tokens, one a line")
    parser.add_argument("--log-level", choices=_LOG_LEVELS, help="log level of the JSON logs on stderr (default info)")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="processes sharing the proxy port (SO_REUSEPORT), for gateway mode on several cores; more than one "
        "needs state.backend sqlite or redis (default 1)",
    )


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Flags beat SIDECAR_* variables, which beat the --config file (each flag is named after its key)."""
    flags: dict[str, Any] = {
        "listen": args.listen,
        "admin_listen": args.admin_listen,
        "anthropic_upstream": args.anthropic_upstream,
        "openai_upstream": args.openai_upstream,
        "policies": args.policies,
        "admin_token_file": args.admin_token_file,
    }
    if args.log_level is not None:
        flags["telemetry"] = {"log_level": args.log_level}
    return load_settings(args.config, flags)


def _run(args: argparse.Namespace) -> int:
    from sidecar.app import serve
    from sidecar.runtime import run_loop, settle_process
    from sidecar.telemetry.logs import configure_logging
    from sidecar.workers import STARTUP_ERRORS, Supervisor, check_workers

    settings = settings_from_args(args)
    check_workers(settings, args.workers)
    configure_logging(settings.telemetry.log_level)
    try:
        if args.workers > 1:
            run_loop(Supervisor(settings, args.workers).run())
        else:
            run_loop(serve(settings, ready=lambda _running: settle_process()))
    except STARTUP_ERRORS as exc:
        print(f"sidecar: cannot start: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def _demo(args: argparse.Namespace) -> int:
    try:
        from sidecar.demo import run_demo
    except ModuleNotFoundError as exc:
        if exc.name != "anthropic":
            raise
        print("sidecar demo: the demo drives the official Anthropic SDK: pip install 'sidecar[demo]'", file=sys.stderr)
        return 1

    return asyncio.run(run_demo(verbose=args.verbose, rejection_log=args.rejection_log, decision_log=args.decision_log))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sidecar",
        description="Policy-and-observability sidecar for LLM agents: checks every tool call between an agent "
        "and its model provider.",
        epilog="Start with `sidecar demo`; `sidecar COMMAND --help` describes each command.",
    )
    parser.add_argument("--version", action="version", version=f"sidecar {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="run the proxy and admin ports",
        description="Run the sidecar: the proxy port the agent's SDK points at, and the admin port (/metrics, "
        "/healthz, /readyz, /v1/status, /approvals). Settings: flags > SIDECAR_* environment > --config file "
        "> defaults.",
    )
    _add_run_flags(run)
    run.set_defaults(func=_run)

    demo = sub.add_parser(
        "demo",
        help="offline demo: scripted model, sidecar and a support agent",
        description="A two-minute offline tour: a scripted model, one real sidecar and a support agent using the "
        "official Anthropic SDK. Needs the demo extra (pip install 'sidecar[demo]'). Writes nothing outside a "
        "temporary directory unless --rejection-log is given.",
    )
    demo.add_argument("-v", "--verbose", action="store_true", help="also print the sidecar's JSON log lines")
    demo.add_argument("--rejection-log", metavar="FILE", help="keep the rejected-payload log in FILE")
    demo.add_argument(
        "--decision-log", metavar="FILE", help="write every policy decision with its input to FILE (policy replay)"
    )
    demo.set_defaults(func=_demo)

    for register in _registrars():
        register(sub)
    return parser


def _quiet_on_closed_pipe() -> int:
    """`sidecar … | head`: the reader left. Exit quietly, as cat and grep do (no traceback)."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail again
    return 141  # 128 + SIGPIPE, what a shell reports for a writer killed by a closed pipe


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()
    except ConfigError as exc:
        print(f"sidecar: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _quiet_on_closed_pipe()
    return int(code or 0)


if __name__ == "__main__":
    raise SystemExit(main())
