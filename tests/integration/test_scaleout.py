"""Three local replicas behind NGINX (least_conn over gRPC): one is killed under a bounded load. The calls
in flight on it fail at the gateway (UNAVAILABLE), the client's gRPC retry policy replays them (inference
is idempotent), no call fails for the client, and the survivors take all the traffic."""

import pytest

from hotpath.engines import build_repository
from hotpath.monitoring.endpoints import load_endpoints
from hotpath.scaleout import failover
from hotpath.scaleout.nginx import GatewaySettings, LocalNginx
from hotpath.scaleout.replicas import LocalReplicas
from hotpath.server.ports import free_ports
from hotpath.server.subset import linked


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    build_repository()  # incremental: nothing to do once `make engines` ran
    text = next(e for e in load_endpoints("cpu") if e.name == "text_embedding")
    repository = linked(text.models, tmp_path_factory.mktemp("repository"))
    # One ORT thread per replica: three replicas share two cores.
    with LocalReplicas(3, repository, ort_threads=1) as replicas:
        settings = GatewaySettings(free_ports(1)[0], tuple(replicas.grpc_urls))
        with LocalNginx(settings) as gateway:
            yield failover.run(replicas, gateway, "text_embedding", "TEXT", clients=4, duration_s=9, kill_after_s=3)


def test_load_spread_over_all_replicas_before_the_kill(result):
    before = result.served_share(after=False)
    assert len(before) == 3 and min(before.values()) >= 3, before


def test_no_request_fails_when_a_replica_dies(result):
    assert len(result.calls) > 40
    assert result.broken == [], [(c.error, round(c.start - result.kill_at, 3)) for c in result.broken]
    # Anything else that failed was shed by a replica's queue policy (an overloaded host), not the kill.
    assert all("timeout" in c.error.lower() or "queue" in c.error.lower() for c in result.failed), result.failed
    assert result.gateway_errors or result.retried, "the kill met no call in flight: nothing was proven"


def test_only_calls_in_flight_on_the_dead_replica_failed_at_the_gateway(result):
    errors = result.gateway_errors
    assert all(h.served_by == result.killed for h in errors), errors
    # Each was on the replica when it died: it ended within a second of the kill.
    assert all(abs(h.at - result.kill_at) < 1.0 for h in errors), [h.at - result.kill_at for h in errors]
    assert len(errors) <= 4, "at most one call per client connection was in flight"


def test_traffic_moves_to_the_survivors(result):
    after = result.served_share(after=True)
    assert result.killed not in after and len(after) == 2 and sum(after.values()) > 10, after
    # Calls NGINX sent on before it had given anything to the dead replica; then it skips it entirely.
    assert all(h.upstreams[0] == result.killed and h.status == 200 for h in result.retried)
    # Once NGINX marked the replica down no call met it again within its fail_timeout (10 s).
    assert result.disrupted_ms < 1000, result.disrupted_ms
    assert all(h.at - result.kill_at < 1.0 for h in result.tries_on_killed)
