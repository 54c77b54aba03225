"""How soon each streamed event is forwarded: a paced stream (one event every few ms) through
`sidecar run` and straight from the mock (proxybench/paced.py says how it is measured).

The text events before the first tool call are the ones a sidecar forwards at once (the
issue's target: within 0.3 ms of their arrival); from the first call on it holds the events
until the call set is checked, by design, so those are reported apart. c=1, requests
alternating direct and sidecar. Nothing is asserted. `run.py` judges the same target.

Run: .venv/bin/python bench/bench_paced.py [--n 20] [--pace-ms 2] [--policies SPEC]
"""

from __future__ import annotations

import argparse
import asyncio

import aiohttp
from proxybench.bodies import Api, check_turn
from proxybench.paced import per_event
from proxybench.targets import mock_and_sidecar


async def main(n: int, pace_ms: float, policies: str) -> None:
    check_turn()
    async with mock_and_sidecar("sidecar-paced-", policies) as (mock, sidecar), aiohttp.ClientSession() as http:
        for api in Api:
            print((await per_event(http, mock.url, sidecar.url, api, n, pace_ms)).line(), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--pace-ms", type=float, default=2.0)
    parser.add_argument("--policies", default="builtin")
    args = parser.parse_args()
    asyncio.run(main(args.n, args.pace_ms, args.policies))
