"""hotpath.shared_state and the gateway's Redis parts without NGINX or a redis-server: the URL, the tenants'
Redis keys, the exact cache's key, the gateway config's cache filters (the redis-server tests are in
tests/tools/test_shared_state_redis.py)."""

import hashlib
import json
import os

import pytest

from hotpath.errors import HotpathError
from hotpath.gateway.config import TenantGatewaySettings, config
from hotpath.gateway.front_door import CONFIG_FILE, GCRA_SCRIPT, PublicModel
from hotpath.gateway.tenants import new_token, parse_tenants
from hotpath.nginx.directives import render
from hotpath.shared_state.cache_key import cache_key, repository_build
from hotpath.shared_state.target import RedisTarget, parse_url
from hotpath.specs.repository import Repository


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
                                   "redis_failure": "closed", "cache_namespace": "a",
                                   # no scopes: every endpoint (front_door.callable_names)
                                   "calls": {"text_embedding": "call"}, "openai": {},
                                   "public_list": "text_embedding"}
    assert cfg["models"]["text_embedding"]["cacheable"] is True
    assert "redis" not in json.loads(plain.private_files()[CONFIG_FILE])
    assert os.path.basename(GCRA_SCRIPT) == "gcra.redis.lua"


def test_a_store_endpoint_is_cached_with_a_version_and_its_reads_only():
    """retrieval (an OP input: writes) is cacheable as a store whatever its response_cache; its version key
    and the write input reach front_door.lua."""
    from hotpath.gateway.front_door import _public, front_door_json
    from hotpath.specs.config_pbtxt import parse_pbtxt

    config = parse_pbtxt('name: "retrieval" max_batch_size: 8 '
                         'input { name: "TEXT" data_type: TYPE_STRING dims: [1] } '
                         'input { name: "OP" data_type: TYPE_STRING dims: [1] optional: true } '
                         'output { name: "IDS" data_type: TYPE_STRING dims: [-1] }')
    store = _public("retrieval", config)
    assert store.store and store.cacheable
    del config.input[1]
    plain = _public("search_only", config)
    assert not plain.store and not plain.cacheable
    cfg = json.loads(front_door_json((store, plain), (), 1, 1, "busy", "t", "k", RedisTarget("127.0.0.1", 1),
                                     {"build": "b"}))
    assert cfg["store_input"] == "OP" and cfg["cache"]["store_prefix"] == "hotpath:store_version:"
    assert cfg["models"]["retrieval"]["store"] is True and cfg["models"]["search_only"]["store"] is False
