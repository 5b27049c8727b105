"""Three local replicas behind NGINX, through the tenant gateway (the front door) and through the bare replica
balancer: one replica is killed under a bounded load. The calls in flight on it fail at the front
(UNAVAILABLE), the client's gRPC retry policy replays them (inference is idempotent), no call fails for the
client, and the survivors take all the traffic. No timing bound: each claim is about which replica served
what, and about order on NGINX's own clock."""

import pytest

from hotpath.monitoring.endpoints import load_endpoints
from hotpath.nginx.local_nginx import LocalNginx
from hotpath.repository_build import build_repository
from hotpath.scaleout.replicas import LocalReplicas
from hotpath.server.subset import linked
from perf.lab.studies import failover_load as failover

NGINX_CLOCK_SLACK_S = 0.05   # NGINX caches its clock per event-loop turn


@pytest.fixture(scope="module", params=failover.FRONTS)
def result(request, tmp_path_factory):
    build_repository()  # incremental: nothing to do once `make engines` ran
    text = next(e for e in load_endpoints("cpu") if e.name == "text_embedding")
    repository = linked(text.models, tmp_path_factory.mktemp("repository"))
    # One ORT thread per replica: three replicas share two cores.
    with LocalReplicas(3, repository, ort_threads=1) as replicas:
        config, headers = failover.front(request.param, replicas)
        with LocalNginx(config) as front:
            run = failover.run(replicas, front, "text_embedding", "TEXT", clients=4, duration_s=9, kill_after_s=3,
                               headers=headers)
            run.front_kind = request.param
            yield run


def test_load_spread_over_all_replicas_before_the_kill(result):
    before = result.served_share(after=False)
    assert len(before) == 3 and min(before.values()) >= 3, before


def test_no_request_fails_when_a_replica_dies(result):
    assert len(result.calls) > 40
    assert result.failed == [], [(c.error, round(c.start - result.kill_at, 3)) for c in result.failed]
    assert result.gateway_errors or result.retried, "the kill met no call in flight: nothing was proven"


# Known defect (found 2026-12-03): through the tenant gateway a gRPC call whose body
# front_door.lua has read fails on NGINX's retry to the next replica, which is then marked down for
# fail_timeout; the client's own retry still answers every call (test_no_request_fails_when_a_replica_dies).
GATEWAY_RETRY_DEFECT = "a gRPC call whose body front_door.lua read fails on NGINX's retry to the next replica"


def _known_gateway_retry_defect(result):
    if result.front_kind == "tenant gateway":
        pytest.xfail(GATEWAY_RETRY_DEFECT)


def test_only_calls_in_flight_on_the_dead_replica_failed_at_the_front(result):
    errors = result.gateway_errors
    if not all(h.served_by == result.killed for h in errors):
        _known_gateway_retry_defect(result)
    assert all(h.served_by == result.killed for h in errors), errors
    # Each was on the replica when it died: it began before the replica was reaped (a later call finds its
    # port closed and is passed on) and ended after the kill. `started` comes from NGINX's clock, which it
    # caches once per event-loop turn: on a busy host that lags by milliseconds (7.8 ms seen in CI).
    assert all(h.started <= result.dead_at + NGINX_CLOCK_SLACK_S and h.at >= result.kill_at - NGINX_CLOCK_SLACK_S
               for h in errors), \
        [(h.started - result.dead_at, h.at - result.kill_at) for h in errors]
    assert len(errors) <= 4, "at most one call per client connection was in flight"


def test_traffic_moves_to_the_survivors(result):
    after = result.served_share(after=True)
    if len(after) != 2:
        _known_gateway_retry_defect(result)
    assert result.killed not in after and len(after) == 2 and sum(after.values()) > 10, after
    # Calls NGINX sent on before it had given anything to the dead replica.
    assert all(h.upstreams[0] == result.killed and h.status == 200 for h in result.retried)
    # Once NGINX had seen the replica fail it sent it nothing within its fail_timeout (10 s; the run lasts 6 s
    # after the kill).
    if not result.marked_down_at:   # seen once on a busy host: the in-flight calls ended at the kill itself
        pytest.xfail("no call NGINX saw fail, so it never marked the dead replica down: nothing to check")
    assert result.tries_after_marked_down == [], result.tries_after_marked_down
