"""hotpath.shared_state against a real redis-server (LocalRedis): the gateway's GCRA script, the shared
budget, the OpenAI API's answer cache, and LocalRedis's lifetime."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from hotpath.gateway.front_door import GCRA_SCRIPT
from hotpath.shared_state.cache_key import cache_key
from hotpath.shared_state.quota import SharedBudget, rate_key, tokens_key
from hotpath.shared_state.server import LocalRedis, ping
from hotpath.shared_state.target import RedisTarget


@pytest.fixture(scope="module")
def redis():
    with LocalRedis() as server:
        yield server


def _gcra(client, key, rate, burst, cost):
    allowed, wait_us = client.eval(GCRA_SCRIPT.read_text(), 1, key, f"{1e6 / rate:.3f}", burst, cost)
    return allowed, wait_us


def test_gcra_script_admits_burst_plus_one_then_the_rate(redis):
    client = redis.target.client()
    key = f"hotpath:rate:t{time.time_ns()}"
    assert [_gcra(client, key, 1, 2, 1)[0] for _ in range(4)] == [1, 1, 1, 0]   # 1/s: burst 2 + 1 at once
    allowed, wait_us = _gcra(client, key, 1, 2, 1)
    assert allowed == 0 and 0 < wait_us <= 1_000_000
    ttl = client.pttl(key)
    assert 0 < ttl <= 4000, "the key lives as long as its budget is in use"
    stored = client.get(key).decode()
    assert stored.isdigit() and len(stored) >= 16, "microseconds written in full, not as 1.7e+15"


def test_python_services_share_the_gateways_budget(redis):
    """SharedBudget (the OpenAI API's way) runs the gateway's script on the gateway's keys."""
    client = redis.target.client()
    client.script_flush()   # as after a Redis restart: EVALSHA answers NOSCRIPT, the script is sent again
    budget = SharedBudget(client)
    tenant = f"t{time.time_ns()}"
    assert budget.take(tokens_key(tenant), 100 / 60, 99, 60) == (True, 0)   # 100 per minute, burst 99
    assert budget.take(tokens_key(tenant), 100 / 60, 99, 60) == (False, 12)   # 40 left: 20 more come in 12 s
    assert _gcra(client, tokens_key(tenant), 100 / 60, 99, 40)[0] == 1   # the raw script sees the same key
    assert budget.take(tokens_key(tenant), 100 / 60, 99, 101) == (False, None)
    assert budget.take(rate_key(tenant), 5, 0) == (True, 0) and budget.take(rate_key(tenant), 5, 0) == (False, 1)


def test_the_openai_apis_answer_cache(redis):
    """Exact answers under hotpath.shared_state's key; semantic ones only within the threshold and the same
    context; an unreachable Redis is a miss, not an error."""
    import asyncio

    import numpy as np

    from hotpath.openai_api.answer_cache import AnswerCache

    def unit(*v):
        v = np.array(v, dtype=np.float32)
        return v / np.linalg.norm(v)

    async def run():
        cache = AnswerCache(redis.target.client(asyncio=True), "b1", ttl_s=60, threshold=0.9)
        assert await cache.get("ns", "chat", b"req") is None
        await cache.put("ns", "chat", b"req", b"answer")
        assert await cache.get("ns", "chat", b"req") == b"answer" and await cache.get("other", "chat", b"req") is None
        assert 0 < redis.target.client().ttl(cache_key("ns", "chat", "b1", b"req")) <= 60
        await cache.remember("ns", "chat", b"ctx", unit(1, 0, 0), b"one")
        await cache.remember("ns", "chat", b"ctx", unit(0, 1, 0), b"two")
        answer, score = await cache.similar("ns", "chat", b"ctx", unit(0.1, 1, 0))
        assert answer == b"two" and 0.9 <= score < 1
        assert await cache.similar("ns", "chat", b"ctx", unit(1, 1, 0)) is None   # cos 0.71: below 0.9
        assert await cache.similar("ns", "chat", b"other context", unit(0, 1, 0)) is None
        assert await cache.similar("ns2", "chat", b"ctx", unit(0, 1, 0)) is None
        await cache.client.aclose()
        port = redis.port + 1 if redis.port < 65535 else 1
        down = AnswerCache(RedisTarget("127.0.0.1", port, timeout_ms=50).client(asyncio=True), "b1")
        assert await down.get("ns", "chat", b"req") is None
        await down.put("ns", "chat", b"req", b"x")
        assert await down.similar("ns", "chat", b"ctx", unit(0, 1, 0)) is None
        await down.remember("ns", "chat", b"ctx", unit(0, 1, 0), b"x")
        await down.client.aclose()

    asyncio.run(run())


def test_local_redis_never_outlives_its_owner(tmp_path):
    owner = subprocess.Popen([sys.executable, "-c", "from hotpath.shared_state.server import LocalRedis\n"
                              "import sys, time\nr = LocalRedis().start()\nprint(r.process.pid, r.port, flush=True)\n"
                              "time.sleep(600)"], stdout=subprocess.PIPE, text=True)
    pid, port = map(int, owner.stdout.readline().split())
    assert ping("127.0.0.1", port)
    owner.send_signal(signal.SIGKILL)   # no cleanup code runs
    owner.wait()
    deadline = time.monotonic() + 30
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "redis-server outlived its owner"
        time.sleep(0.05)
    assert not ping("127.0.0.1", port)


def test_local_redis_killed_comes_back_empty_on_its_port():
    with LocalRedis() as server:
        client = server.target.client()
        client.set("k", "v")
        server.kill()
        assert not ping("127.0.0.1", server.port)
        server.start()
        assert client.get("k") is None and ping("127.0.0.1", server.port)
        data_dir = server.dir
    assert not Path(data_dir).exists() and server.process.poll() is not None
