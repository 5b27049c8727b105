"""hotpath.shared_state and the gateway's Redis parts without NGINX: the URL, the tenants' Redis keys,
the exact cache's key, the GCRA script run in a real redis-server, and LocalRedis's lifetime."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from hotpath.errors import HotpathError
from hotpath.gateway.config import TenantGatewaySettings, config
from hotpath.gateway.front_door import CONFIG_FILE, GCRA_SCRIPT, PublicModel
from hotpath.gateway.tenants import new_token, parse_tenants
from hotpath.nginx.directives import render
from hotpath.repository import Repository
from hotpath.shared_state.cache_key import ExactCache, cache_key, repository_build
from hotpath.shared_state.quota import SharedBudget, rate_key, tokens_key
from hotpath.shared_state.server import LocalRedis, ping
from hotpath.shared_state.target import RedisTarget, parse_url


@pytest.fixture(scope="module")
def redis():
    with LocalRedis() as server:
        yield server


def test_urls():
    target = parse_url("redis://:s3cret@cache.internal:6380/2?timeout_ms=50")
    assert target == RedisTarget("cache.internal", 6380, 2, "s3cret", 50)
    assert "s3cret" not in repr(target) and "s3cret" not in target.url
    assert parse_url("redis://localhost") == RedisTarget("localhost")
    for bad in ("rediss://h:1", "http://h", "redis://h:1/x", "redis://h?timeout_ms=0", "redis://h?tls=1", "h:6379"):
        with pytest.raises(HotpathError, match="HOTPATH_REDIS_URL"):
            parse_url(bad)


def test_tenants_redis_policy_and_cache_namespace():
    token, other = new_token(), new_token()
    (a, b) = parse_tenants({"defaults": {"redis_failure": "closed"},
                            "tenants": {"a": {"token": token}, "b": {"token": other, "redis_failure": "open",
                                                                     "cache_namespace": "shared"}}}, "t")
    assert (a.redis_failure, a.namespace, b.redis_failure, b.namespace) == ("closed", "a", "open", "shared")
    for entry, match in (({"redis_failure": "maybe"}, "redis_failure must be one of"),
                         ({"cache_namespace": "Has:Colon"}, "cache_namespace must be"),
                         ({"cache_namespace": 3}, "cache_namespace must be")):
        with pytest.raises(HotpathError, match=match):
            parse_tenants({"tenants": {"a": {"token": token, **entry}}}, "t")


def test_cache_key_and_build_fingerprint(tmp_path):
    key = cache_key("acme", "text_embedding", "0123456789abcdef", b"request")
    assert key == "hotpath:cache:acme:text_embedding:0123456789abcdef:" + hashlib.sha256(b"request").hexdigest()
    model = tmp_path / "m"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('name: "m"\nbackend: "python"\n')
    first = repository_build(Repository(tmp_path))
    (model / "1" / ".hotpath-build.json").write_text('{"digest": "a"}')
    second = repository_build(Repository(tmp_path))
    (model / "1" / ".hotpath-build.json").write_text('{"digest": "b"}')
    assert len({first, second, repository_build(Repository(tmp_path))}) == 3, "a rebuild changes every key"


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


def test_exact_cache_for_python_callers(redis):
    cache = ExactCache(redis.target.client(), "b1", ttl_s=60)
    assert cache.get("ns", "chat", b"req") is None
    cache.put("ns", "chat", b"req", b"answer")
    assert cache.get("ns", "chat", b"req") == b"answer" and cache.get("other", "chat", b"req") is None
    assert 0 < redis.target.client().ttl(cache.key("ns", "chat", b"req")) <= 60
    down = ExactCache(RedisTarget("127.0.0.1", redis.port + 1 if redis.port < 65535 else 1, timeout_ms=50).client(),
                      "b1")
    assert down.get("ns", "chat", b"req") is None   # an unreachable Redis is a miss, not an error
    down.put("ns", "chat", b"req", b"x")


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


def test_config_with_redis_has_the_cache_filters_and_the_status_server(tmp_path):
    model = PublicModel("text_embedding", {"TEXT": ("BYTES", False)}, ("EMBEDDING",), 8, False, cacheable=True)
    tenants = parse_tenants({"tenants": {"a": {"token": new_token(), "redis_failure": "closed"}}}, "t")
    plain = TenantGatewaySettings(1, 2, ("h:1",), ("h:2",), tenants, models=(model,))
    shared = TenantGatewaySettings(1, 2, ("h:1",), ("h:2",), tenants, models=(model,), status_port=3,
                                   redis=RedisTarget("127.0.0.1", 6379, timeout_ms=40), cache_build="b")
    assert "filter_by_lua" not in render(config(plain, tmp_path)) and "/metrics" not in render(config(plain, tmp_path))
    text = render(config(shared, tmp_path))
    assert "header_filter_by_lua" in text and "body_filter_by_lua" in text and "127.0.0.1:3" in text
    cfg = json.loads(shared.private_files()[CONFIG_FILE])
    assert cfg["redis"]["timeout_ms"] == 40 and cfg["redis"]["gcra_sha"] and cfg["cache"]["build"] == "b"
    assert cfg["tenants"]["a"] == {"requests_per_s": 100, "burst": 50, "tokens_per_min": 30000,
                                   "redis_failure": "closed", "cache_namespace": "a"}
    assert cfg["models"]["text_embedding"]["cacheable"] is True
    assert "redis" not in json.loads(plain.private_files()[CONFIG_FILE])
    assert os.path.basename(GCRA_SCRIPT) == "gcra.redis.lua"
