"""One `store` fixture, parametrized over the memory, SQLite and Redis backends."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from sidecar.state import Limits, MemoryStore, StateStore
from sidecar.state.redis import RedisStore
from sidecar.state.sqlite import SQLiteStore

BACKENDS = ["memory", "sqlite", "redis"]

MakeStore = Callable[..., Awaitable[StateStore]]


@pytest.fixture
def fresh_redis(request: pytest.FixtureRequest) -> Callable[[], str]:
    """The shared server's URL, emptied; requested lazily so memory/sqlite need no server."""

    def get() -> str:
        url: str = request.getfixturevalue("redis_url")
        with redis.Redis.from_url(url) as client:
            client.flushdb()
        return url

    return get


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
async def make_store(backend: str, tmp_path: Path, fresh_redis: Callable[[], str]) -> AsyncIterator[MakeStore]:
    """`await make_store(**limits)`: a new store instance; instances of one test share data
    (same SQLite file, same Redis), as separate sidecar processes would."""
    opened: list[StateStore] = []
    url = fresh_redis() if backend == "redis" else ""
    memory: MemoryStore | None = None

    async def make(**limits: Any) -> StateStore:
        nonlocal memory
        lim = Limits(**limits)
        store: StateStore
        if backend == "memory":
            if memory is None:
                memory = MemoryStore(lim)
            store = memory
        elif backend == "sqlite":
            store = SQLiteStore(str(tmp_path / "state.db"), lim)
        else:
            store = RedisStore(url, lim)
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


@pytest.fixture
async def store(make_store: MakeStore) -> StateStore:
    return await make_store()
