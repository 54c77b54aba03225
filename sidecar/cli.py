"""The `sidecar` command: run, demo, policy, approvals, rejections, status."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from typing import Any

from sidecar import __version__
from sidecar.config import ConfigError, Settings, load_settings

# Subcommand modules each expose `register(subparsers)`; leaves set `func(args) -> int`.
Registrar = Callable[[Any], Any]


def _registrars() -> list[Registrar]:
    from sidecar.policy.cli import register as policy
    from sidecar.schemas.cli import register as schemas
    from sidecar.telemetry.rejections_cli import register as rejections
    from sidecar.telemetry.status_cli import register as status

    registrars: list[Registrar] = [policy, rejections, schemas, status]
    for module in ("sidecar.admin.cli",):
        try:
            registrars.append(__import__(module, fromlist=["register"]).register)
        except ImportError:
            continue
    return registrars


def _add_run_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML settings file")
    parser.add_argument("--listen", metavar="HOST:PORT", help="proxy port (default 127.0.0.1:8080)")
    parser.add_argument("--admin-listen", metavar="HOST:PORT", help="admin port (default 127.0.0.1:9477)")
    parser.add_argument("--anthropic-upstream", metavar="URL", help="default https://api.anthropic.com")
    parser.add_argument("--openai-upstream", metavar="URL", help="default https://api.openai.com")
    parser.add_argument("--policies", metavar="DIR", help="directory of Rego policies and data.json")
    parser.add_argument("--admin-token-file", metavar="FILE", help="admin bearer tokens, one a line")


def settings_from_args(args: argparse.Namespace) -> Settings:
    flags = {
        "listen": args.listen,
        "admin_listen": args.admin_listen,
        "anthropic_upstream": args.anthropic_upstream,
        "openai_upstream": args.openai_upstream,
        "policies": args.policies,
        "admin_token_file": args.admin_token_file,
    }
    return load_settings(args.config, flags)


def _run(args: argparse.Namespace) -> int:
    from sidecar.app import serve
    from sidecar.telemetry.logs import configure_logging

    settings = settings_from_args(args)
    configure_logging(settings.telemetry.log_level)
    try:
        asyncio.run(serve(settings))
    except OSError as exc:
        print(f"sidecar: cannot start: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def _demo(args: argparse.Namespace) -> int:
    from sidecar.demo import run_demo

    return asyncio.run(run_demo(verbose=args.verbose, rejection_log=args.rejection_log, decision_log=args.decision_log))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sidecar", description="Policy-and-observability sidecar for LLM agents")
    parser.add_argument("--version", action="version", version=f"sidecar {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the proxy and admin ports")
    _add_run_flags(run)
    run.set_defaults(func=_run)

    demo = sub.add_parser("demo", help="offline demo: scripted model, sidecar and a support agent")
    demo.add_argument("-v", "--verbose", action="store_true", help="also print the sidecar's log lines")
    demo.add_argument("--rejection-log", metavar="FILE", help="keep the rejected-payload log in FILE")
    demo.add_argument(
        "--decision-log", metavar="FILE", help="write every policy decision with its input to FILE (policy replay)"
    )
    demo.set_defaults(func=_demo)

    for register in _registrars():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
    except ConfigError as exc:
        print(f"sidecar: {exc}", file=sys.stderr)
        return 2
    return int(code or 0)


if __name__ == "__main__":
    raise SystemExit(main())
