"""Generated Prometheus rules and Grafana dashboards: fresh, valid for promtool, tied to perf/slo.toml."""

import json
import tomllib

import pytest
import yaml

from hotpath import paths
from hotpath.monitoring import promql
from hotpath.monitoring.dashboard import GPU_METRICS, dashboard, expressions
from hotpath.monitoring.endpoints import load_endpoints, profiles
from hotpath.monitoring.generate import outputs, stale
from hotpath.monitoring.rules import all_alerts, queue_budget_ms

MONITORING = paths.ROOT / "monitoring"
SLO = tomllib.loads((paths.ROOT / "perf" / "slo.toml").read_text())["profiles"]




def test_generated_files_are_fresh():
    assert not stale(), "run `hotpath monitoring` and commit: " + ", ".join(map(str, stale()))






@pytest.mark.parametrize("profile", sorted(SLO))
def test_p95_alert_thresholds_come_from_slo_toml(profile):
    rules = yaml.safe_load((MONITORING / "rules" / f"hotpath-{profile}.rules.yml").read_text())
    alerts = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "HotpathP95OverTarget"]
    declared = SLO[profile]["endpoints"]
    assert {a["labels"]["endpoint"] for a in alerts} == set(declared)
    for a in alerts:
        target = declared[a["labels"]["endpoint"]]["p95_ms"]
        assert a["expr"].endswith(f"> {float(target)}"), a["expr"]
        queue = next(r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "HotpathQueueTimeRising"
                     and r["labels"]["endpoint"] == a["labels"]["endpoint"])
        assert f"> {queue_budget_ms(target)} and" in queue["expr"]


def test_changed_target_changes_the_rules(tmp_path):
    text = (paths.ROOT / "perf" / "slo.toml").read_text().replace("p95_ms = 25.0", "p95_ms = 40.0", 1)
    (tmp_path / "slo.toml").write_text(text)
    endpoints = {e.name: e for e in load_endpoints("cpu", slo_path=tmp_path / "slo.toml")}
    p95 = [a for a in all_alerts(list(endpoints.values())) if a.alert == "HotpathP95OverTarget"]
    assert any(a.expr.endswith("> 40.0") for a in p95)


def test_cached_endpoint_latency_comes_from_its_parts():
    # Triton publishes no request summary for a model with the response cache on.
    for e in load_endpoints("cpu"):
        expr = promql.latency_quantile_ms(e, "0.95")
        own = f'nv_inference_request_summary_us{{model="{e.name}"'
        if not e.response_cache:
            assert own in expr
        elif e.steps == (e.name,):
            assert own not in expr and all(f'{m}{{model="{e.name}"' in expr for m in promql.PHASE_SUMMARIES)
        else:
            assert own not in expr and all(s in expr for s in e.steps)


def test_latency_parts_for_each_kind_of_endpoint():
    from hotpath.specs.repository import Endpoint

    def endpoint(name, steps, cached):
        return Endpoint(name, steps, inputs=(), instances=(1,) * len(steps), response_cache=cached)

    single = promql.latency_quantile_ms(endpoint("m", ("m",), True), "0.99")
    assert single.count("_summary_us{") == 4 and 'quantile="0.99"' in single
    ensemble = promql.latency_quantile_ms(endpoint("e", ("a", "b"), True), "0.5")
    assert 'model=~"a|b"' in ensemble and "nv_inference_request_summary_us" in ensemble
    plain = promql.latency_quantile_ms(endpoint("e", ("a", "b"), False), "0.5")
    assert plain.startswith('max by (model) (nv_inference_request_summary_us{model="e"')


def test_every_alert_has_a_probe_that_keeps_its_comparisons():
    for a in all_alerts(load_endpoints("cpu")):
        assert " bool " in a.probe, a.alert
        assert a.probe.replace(" bool ", " ").replace("(", "").replace(")", "") == \
            a.expr.replace("(", "").replace(")", ""), a.alert


@pytest.mark.parametrize("endpoint", load_endpoints("cpu"), ids=lambda e: e.name)
def test_dashboard_covers_what_operators_watch(endpoint):
    board = json.loads((MONITORING / "dashboards" / f"{endpoint.name}.json").read_text())
    assert board == dashboard(endpoint)
    titles = " | ".join(p["title"] for p in board["panels"]).lower()
    for topic in ("p50 / p95 / p99", "queue vs compute", "throughput", "failure", "cpu", "gpu", "memory"):
        assert topic in titles, topic
    assert ("cache" in titles) == endpoint.response_cache
    exprs = " ".join(expressions(board))
    for metric in ("_summary_us{", "nv_inference_queue_duration_us",
                   "nv_inference_compute_infer_duration_us", "nv_inference_request_failure", *GPU_METRICS):
        assert metric in exprs, metric
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    assert all(t["datasource"]["uid"] == "${datasource}" for p in board["panels"] for t in p["targets"])








def test_outputs_cover_every_profile_and_endpoint():
    names = {p.name for p in outputs()}
    for profile in profiles():
        assert f"hotpath-{profile}.rules.yml" in names
    for e in load_endpoints("cpu"):
        assert f"{e.name}.json" in names
