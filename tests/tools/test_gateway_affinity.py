"""Conversation affinity at the gateway's OpenAI door (hotpath/gateway/affinity.lua, hotpath.gateway.openai_door).

The ring and the bounded-load pick run in a real NGINX (no standalone Lua here): the module's pure functions,
called from a content_by_lua location. The door itself is the real gateway (NGINX + front_door.lua) in front of
two real loopback HTTP servers standing in for the OpenAI API replicas, each answering with its own name: a
conversation's turns stay on one replica, conversations spread over both, one hot conversation is held to the
load bound, a killed replica's conversation goes on on the other one, and calls without a key (no messages,
another route) are balanced by load; a body that is not JSON is refused before any replica."""

import http.client
import http.server
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from hotpath.errors import HotpathError
from hotpath.gateway.config import TenantGatewaySettings
from hotpath.gateway.front_door import CONFIG_FILE, cjson_cpath, module_paths
from hotpath.gateway.openai_door import AFFINITY_FACTOR, UPSTREAM
from hotpath.gateway.tenant_gateway import TenantGateway
from hotpath.gateway.tenants import new_token, parse_tenants
from hotpath.nginx.access_log import LOG_FIELDS
from hotpath.nginx.directives import d, main_context, render
from hotpath.nginx.local_nginx import LocalNginx
from hotpath.server.ports import free_ports

AFFINITY_LUA = Path(__file__).resolve().parents[2] / "hotpath" / "gateway" / "affinity.lua"
TOKENS = {n: new_token() for n in ("alpha", "beta")}
CHAT = "hotpath-chat"
OPENAI = {"models": {CHAT: {"kind": "generation", "default_max_tokens": 16, "endpoint": "gen"},
                     "hotpath-embed": {"kind": "embedding", "default_max_tokens": 1, "endpoint": "m"}}}


# The pure functions, in NGINX ------------------------------------------------------------------------

@dataclass
class _Harness:
    """An NGINX config with one location: POST a JSON list of cases, get each one's results from affinity.lua's
    pure functions (with its own hash, ngx.md5)."""
    http_port: int
    grpc_port: int = 0
    log_fields: tuple = LOG_FIELDS

    @property
    def listen_ports(self):
        return [self.http_port]

    def private_files(self):
        return {}

    def directives(self, workdir):
        code = _HARNESS_LUA.replace("AFFINITY_LUA", str(AFFINITY_LUA))
        return main_context(workdir, [
            d("lua_package_cpath", cjson_cpath()),
            d("client_body_buffer_size", "4m"), d("client_max_body_size", "4m"),   # the cases, in memory
            d("server", block=[d("listen", f"127.0.0.1:{self.http_port}"),
                               d("location", "/", block=[d("content_by_lua", code)])]),
        ], modules=tuple(module_paths()))


_HARNESS_LUA = """
local a = dofile("AFFINITY_LUA")
local cjson = require "cjson"
ngx.req.read_body()
local out = {}
for _, c in ipairs(cjson.decode(ngx.req.get_body_data())) do
  local ring = a.build_ring(c.names, a.hash, c.points)
  local live = {}
  for i = 1, #c.names do live[i] = true end
  for _, i in ipairs(c.down or {}) do live[i] = false end
  local loads = c.loads or {}
  local r = {}
  if c.key then
    r.order = a.order(ring, #c.names, a.hash(c.key))
    r.pick, r.preferred = a.pick(r.order, loads, live, c.factor or 1.25)
    r.bound = a.bound(loads, live, c.factor or 1.25)
  else
    r.least = a.least_loaded(loads, live, c.after or 0)
  end
  out[#out + 1] = r
end
ngx.say(cjson.encode(out))
"""


@pytest.fixture(scope="module")
def lua():
    (port,) = free_ports(1)
    with LocalNginx(_Harness(port)) as nginx:
        def call(cases):
            status, answer = _post(f"127.0.0.1:{port}", "/", cases)
            assert status == 200, nginx._error_log()
            return answer

        yield call


NAMES = ["10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"]


def test_a_key_has_one_ring_order_whatever_the_replicas_order(lua):
    keys = [f"conversation {i}" for i in range(200)]
    forward = lua([{"names": NAMES, "key": k} for k in keys])
    backward = lua([{"names": NAMES[::-1], "key": k} for k in keys])
    for f, b in zip(forward, backward):
        assert sorted(f["order"]) == [1, 2, 3] and f["pick"] == f["order"][0] and f["preferred"]
        assert [NAMES[i - 1] for i in f["order"]] == [NAMES[::-1][i - 1] for i in b["order"]]
    # the keys' first replicas spread: each replica is first for a third of them, give or take
    counts = [sum(1 for f in forward if f["order"][0] == i) for i in (1, 2, 3)]
    assert all(40 <= c <= 95 for c in counts), counts


def test_removing_a_replica_moves_only_its_keys(lua):
    keys = [f"k{i}" for i in range(300)]
    three = lua([{"names": NAMES, "key": k} for k in keys])
    two = lua([{"names": NAMES[:2], "key": k} for k in keys])
    for a, b in zip(three, two):
        if a["order"][0] != 3:   # a key of a kept replica stays on it
            assert b["order"][0] == a["order"][0]
        else:                    # the removed replica's keys go to the next one on its ring
            assert b["order"][0] == a["order"][1]


def test_the_preferred_replica_over_the_bound_passes_the_key_to_the_next_on_the_ring(lua):
    (base,) = lua([{"names": NAMES, "key": "hot"}])
    first, second, third = base["order"]
    loads = {first: 5, second: 0, third: 0}
    case = {"names": NAMES, "key": "hot", "loads": [loads[i] for i in (1, 2, 3)]}
    (r,) = lua([case])
    # bound = ceil(1.25 * (5 + 1) / 3) = 3: the preferred one (5) is over it
    assert r["bound"] == 3 and r["pick"] == second and not r["preferred"]
    loads = {first: 2, second: 0, third: 0}
    (r,) = lua([{**case, "loads": [loads[i] for i in (1, 2, 3)]}])
    assert r["bound"] == 2 and r["pick"] == second   # 2 is at the bound: not under it
    loads = {first: 1, second: 0, third: 0}
    (r,) = lua([{**case, "loads": [loads[i] for i in (1, 2, 3)]}])
    assert r["bound"] == 1 and r["pick"] == second   # ceil(1.25 * 2 / 3) = 1
    loads = {first: 1, second: 1, third: 0}
    (r,) = lua([{**case, "loads": [loads[i] for i in (1, 2, 3)]}])
    assert r["bound"] == 2 and r["pick"] == first and r["preferred"]
    loads = {first: 5, second: 5, third: 0}
    (r,) = lua([{**case, "loads": [loads[i] for i in (1, 2, 3)]}])
    assert r["bound"] == 5 and r["pick"] == third   # ceil(1.25 * 11 / 3) = 5: both ahead are at it
    (r,) = lua([{**case, "loads": [0, 0, 0], "down": [first]}])
    assert r["pick"] == second and not r["preferred"]   # a failed replica is skipped


def test_placing_calls_one_by_one_never_exceeds_the_bound(lua):
    """Every call placed with the loads the earlier ones left: no replica ever holds more than
    ceil(factor x mean), even when every call has the same key."""
    for factor in (1.0, AFFINITY_FACTOR, 2.0):
        loads = [0, 0, 0]
        for n in range(1, 61):
            (r,) = lua([{"names": NAMES, "key": "one hot conversation", "loads": loads, "factor": factor}])
            loads[r["pick"] - 1] += 1
            assert max(loads) <= -(-factor * n // 3), (factor, n, loads)


def test_least_loaded_takes_the_emptiest_live_replica_and_rotates_ties(lua):
    r = lua([{"names": NAMES, "loads": [3, 1, 2]}, {"names": NAMES, "loads": [0, 0, 0], "after": 0},
             {"names": NAMES, "loads": [0, 0, 0], "after": 1}, {"names": NAMES, "loads": [0, 0, 0], "after": 2},
             {"names": NAMES, "loads": [3, 1, 2], "down": [2]}])
    assert [x["least"] for x in r] == [2, 1, 2, 3, 3]


# The door: real NGINX, real loopback replicas --------------------------------------------------------

class _Replica:
    """A loopback HTTP server answering every POST with its name (body and X-Replica header); while `hold`
    is clear it keeps each call open (counted in `waiting`) until it is set."""

    def __init__(self, name: str, port: int):
        self.name, self.port = name, port
        self.hold = threading.Event()
        self.hold.set()
        self.waiting = 0
        self.lock = threading.Lock()
        replica = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"   # one call per connection: a stopped replica refuses the next

            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length") or 0))
                with replica.lock:
                    replica.waiting += 1
                replica.hold.wait(30)
                body = json.dumps({"replica": replica.name}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("x-replica", replica.name)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                with replica.lock:
                    replica.waiting -= 1

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.running = True

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self):
        if self.running:
            self.running = False
            self.hold.set()
            self.server.shutdown()
            self.server.server_close()


def _post(url, path, body, token=None, raw=None):
    host, port = url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        data = raw if raw is not None else json.dumps(body).encode()
        headers = {"content-type": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        conn.request("POST", path, data, headers)
        r = conn.getresponse()
        text = r.read()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, text
    finally:
        conn.close()


def _gateway(replicas, affinity=True):
    grpc_port, http_port, openai_port, up_grpc, up_http = free_ports(5)
    tenants = parse_tenants({"tenants": {n: {"token": t, "requests_per_s": 10000, "burst": 10000,
                                             "tokens_per_min": 10_000_000} for n, t in TOKENS.items()}}, "test")
    return TenantGateway(TenantGatewaySettings(
        grpc_port, http_port, (f"127.0.0.1:{up_grpc}",), (f"127.0.0.1:{up_http}",), tenants, max_in_flight=64,
        openai_port=openai_port, openai_upstreams=tuple(r.address for r in replicas), openai=OPENAI,
        openai_affinity=affinity, fail_timeout_s=30))


@pytest.fixture
def door():
    replicas = [_Replica(name, port) for name, port in zip("ab", free_ports(2))]
    try:
        with _gateway(replicas) as gateway:
            yield gateway, replicas
    finally:
        for r in replicas:
            r.stop()


def _conversation(i: int, turns: int, system: str = "You are terse.") -> list[dict]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": f"question {i}: why?"}]
    for t in range(1, turns):
        messages += [{"role": "assistant", "content": f"answer {t}"}, {"role": "user", "content": f"and {t}?"}]
    return messages


def _chat(gateway, messages, tenant="alpha"):
    status, answer = _post(f"127.0.0.1:{gateway.settings.openai_port}", "/v1/chat/completions",
                           {"model": CHAT, "messages": messages, "max_tokens": 4}, TOKENS[tenant])
    assert status == 200, (status, answer)
    return answer["replica"]


def test_a_conversations_turns_stay_on_its_replica_and_conversations_spread(door):
    gateway, _ = door
    served = {}
    for i in range(40):
        turns = [_chat(gateway, _conversation(i, t)) for t in (1, 2, 3)]
        assert len(set(turns)) == 1, (i, turns)
        served[i] = turns[0]
    counts = [list(served.values()).count(name) for name in "ab"]
    assert min(counts) >= 8, counts   # both replicas hold conversations (40 keys, P(fewer than 8) ~ 1e-5)
    # content given as parts is the same conversation as the same text given as a string
    parts = _conversation(0, 2)
    parts[1] = {"role": "user", "content": [{"type": "text", "text": parts[1]["content"]}]}
    assert _chat(gateway, parts) == served[0]


def test_the_key_holds_the_tenant(door):
    gateway, _ = door
    alpha = [_chat(gateway, _conversation(i, 1), "alpha") for i in range(24)]
    beta = [_chat(gateway, _conversation(i, 1), "beta") for i in range(24)]
    assert [_chat(gateway, _conversation(i, 3), "beta") for i in range(24)] == beta   # each tenant's own, stable
    assert alpha != beta   # the same prompts, other keys: with no tenant in the key they would match


def test_one_hot_conversation_is_held_to_the_load_bound(door):
    """Calls of one conversation held open at the replicas: the preferred replica takes them until it is at
    ceil(factor x mean in flight), then the other one does."""
    gateway, replicas = door
    preferred = _chat(gateway, _conversation(7, 1))
    for r in replicas:
        r.hold.clear()
    calls = 20
    threads = []
    answers = []
    try:
        for n in range(1, calls + 1):
            t = threading.Thread(target=lambda: answers.append(_chat(gateway, _conversation(7, 3))))
            t.start()
            threads.append(t)
            deadline = time.monotonic() + 20
            while sum(r.waiting for r in replicas) < n:   # placed: the next one sees it in flight
                assert time.monotonic() < deadline, [r.waiting for r in replicas]
                time.sleep(0.01)
            held = [r.waiting for r in replicas]
            assert max(held) <= -(-AFFINITY_FACTOR * n // 2), (n, held)
        # the conversation's own replica took all the bound allows (least connections would split 10 / 10)
        held = {r.name: r.waiting for r in replicas}
        assert held[preferred] == -(-AFFINITY_FACTOR * calls // 2), held   # 13 of 20
    finally:
        for r in replicas:
            r.hold.set()
        for t in threads:
            t.join(30)
    assert len(answers) == calls and set(answers) == {"a", "b"}, answers


def test_a_killed_replicas_conversation_goes_on_on_the_other(door):
    gateway, replicas = door
    by_name = {r.name: r for r in replicas}
    first = _chat(gateway, _conversation(3, 1))
    assert _chat(gateway, _conversation(3, 2)) == first
    start = len(gateway.log(0, 2))   # the two turns' lines (NGINX writes one after answering)
    by_name[first].stop()
    other = ({"a", "b"} - {first}).pop()
    assert _chat(gateway, _conversation(3, 3)) == other   # turn 3: NGINX passes it on to the live one
    assert _chat(gateway, _conversation(3, 4)) == other
    entries = [e for e in gateway.log(start, 2) if e.uri == "/v1/chat/completions"]
    assert len(entries[0].upstreams) == 2 and entries[0].served_by == by_name[other].address, entries[0]
    assert entries[1].upstreams == (by_name[other].address,), entries[1]   # marked failed: not tried again
    # every other conversation is answered too
    assert {_chat(gateway, _conversation(i, 2)) for i in range(10, 20)} == {other}


def test_calls_without_a_key_are_balanced_by_load_and_bad_bodies_refused(door):
    gateway, replicas = door
    url = f"127.0.0.1:{gateway.settings.openai_port}"
    served = []
    for body in ({"model": CHAT}, {"model": CHAT, "messages": []},
                 {"model": CHAT, "messages": [{"role": "system", "content": "only a system message"}]},
                 {"model": CHAT, "messages": "not a list"}):
        for _ in range(2):
            status, answer = _post(url, "/v1/chat/completions", body, TOKENS["alpha"])
            assert status == 200, answer   # passed on: the API answers its own 400 for these
            served.append(answer["replica"])
    assert served.count("a") == served.count("b") == 4, served   # nothing in flight: taken in turn
    completions = [_post(url, "/v1/completions", {"model": CHAT, "prompt": "same prompt"}, TOKENS["alpha"])[1]
                   for _ in range(4)]
    assert sorted(c["replica"] for c in completions) == ["a", "a", "b", "b"]   # no conversation: no key
    before = sum(1 for e in gateway.log(0, 12) if e.upstreams)
    status, answer = _post(url, "/v1/chat/completions", None, TOKENS["alpha"], raw=b"{not json")
    assert status == 400 and answer["error"]["code"] == "invalid_argument", answer
    status, _ = _post(url, "/v1/chat/completions", {"model": "unknown", "messages": []}, TOKENS["alpha"])
    assert status == 404
    entries = gateway.log(0, 14)
    assert len(entries) == 14 and sum(1 for e in entries if e.upstreams) == before   # refused before any replica


def test_affinity_off_is_one_least_conn_group(tmp_path):
    replicas = ("127.0.0.1:1", "127.0.0.1:2")
    base = dict(grpc_port=1, http_port=2, grpc_upstreams=("127.0.0.1:3",), http_upstreams=("127.0.0.1:4",),
                tenants=(), openai_port=5, openai_upstreams=replicas, openai=OPENAI)
    on, off = TenantGatewaySettings(**base), TenantGatewaySettings(**base, openai_affinity=False)
    on_text, off_text = render(on.directives(tmp_path)), render(off.directives(tmp_path))
    assert f"upstream {UPSTREAM}_1" in on_text and f"upstream {UPSTREAM}_2" in on_text
    assert f"upstream {UPSTREAM}_" not in off_text and f"upstream {UPSTREAM} " in off_text
    assert json.loads(on.private_files()[CONFIG_FILE])["openai"]["affinity"]["replicas"] == list(replicas)
    assert "affinity" not in json.loads(off.private_files()[CONFIG_FILE])["openai"]
    single = TenantGatewaySettings(**{**base, "openai_upstreams": replicas[:1]})
    assert "affinity" not in json.loads(single.private_files()[CONFIG_FILE])["openai"]


def test_the_command_line_option(built_repository, tmp_path):
    from hotpath.gateway import __main__ as gateway_command

    tenants = tmp_path / "tenants.toml"
    tenants.write_text(f'[tenants.acme]\ntoken = "{new_token()}"\n')
    common = ["serve", "--tenants", str(tenants), "--openai-upstream", "api-a:8080", "--openai-upstream", "api-b:8080"]
    on = gateway_command.gateway_settings(gateway_command.command_line().parse_args(common), None)
    assert on.openai_affinity and on.openai_affinity_factor == AFFINITY_FACTOR
    assert json.loads(on.private_files()[CONFIG_FILE])["openai"]["affinity"]["factor"] == AFFINITY_FACTOR
    off = gateway_command.gateway_settings(gateway_command.command_line().parse_args(
        [*common, "--openai-affinity", "off"]), None)
    assert not off.openai_affinity and "affinity" not in json.loads(off.private_files()[CONFIG_FILE])["openai"]
    wide = gateway_command.gateway_settings(gateway_command.command_line().parse_args(
        [*common, "--openai-affinity-factor", "1.5"]), None)
    assert json.loads(wide.private_files()[CONFIG_FILE])["openai"]["affinity"]["factor"] == 1.5
    below = gateway_command.gateway_settings(gateway_command.command_line().parse_args(
        [*common, "--openai-affinity-factor", "0.9"]), None)
    with pytest.raises(HotpathError, match="must be >= 1"):
        below.private_files()
