"""deploy/: kustomize overlays rendered by kubectl and validated offline against a pinned Kubernetes. That only the
gateway is reachable from outside: tests/tools/test_public_doors.py."""

import re

import kubernetes_validate
import pytest
import yaml

from hotpath import paths
from hotpath.monitoring.adapter import METRIC
from hotpath.monitoring.endpoints import load_endpoints
from hotpath.monitoring.rules import queue_budget_ms
from hotpath.specs.repository import Repository
from tests.manifests import DEPLOY, OVERLAYS, by_kind, kustomize, named, pod_templates, selects

KUBERNETES_VERSION = "1.31.0"   # the oldest release whose API has every field deploy/ uses (preStop sleep)
TRITON, GATEWAY = "hotpath", "hotpath-gateway"   # the two Deployments (and their HPA and PDB)


class Rendered(dict):
    """An overlay's objects by kind, with lookups by name."""

    def one(self, kind: str, name: str) -> dict:
        return named(self.get(kind, []), kind, name)

    def pod(self, deployment: str) -> dict:
        return self.one("Deployment", deployment)["spec"]["template"]["spec"]

    def container(self, deployment: str, name: str) -> dict:
        (c,) = [c for c in self.pod(deployment)["containers"] if c["name"] == name]
        return c


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request):
    return request.param, Rendered(by_kind(kustomize(DEPLOY / "overlays" / request.param)))


@pytest.mark.parametrize("path", [*(f"overlays/{o}" for o in OVERLAYS), "prometheus-adapter", "redis"])
def test_renders_and_validates_strictly(path):
    docs = kustomize(DEPLOY / path)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_validator_rejects_what_the_pinned_release_lacks():
    deployment = named(kustomize(DEPLOY / "overlays" / "cpu"), "Deployment", TRITON)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, "1.28.0", strict=True)   # preStop sleep came in 1.29
    deployment["spec"]["template"]["spec"]["containers"][0]["startupProbe"]["httpGet"]["paht"] = "/"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


ENDPOINTS = Repository(paths.model_repository()).endpoints()


def test_probes_send_real_requests_after_startup(overlay):
    _, k = overlay
    container = k.container(TRITON, "triton")
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    # Triton's ready stays 200 with a dead stub (tests/integration/test_stub_health.py): probe for real.
    assert "--liveness" in container["livenessProbe"]["exec"]["command"], "overload must not restart a pod"
    assert "--liveness" not in container["readinessProbe"]["exec"]["command"]
    assert container["readinessProbe"]["failureThreshold"] >= 2, "one slow probe must not drop a pod"
    for probe in (container["readinessProbe"], container["livenessProbe"]):
        assert probe["exec"]["command"][:3] == ["python3", "-m", "hotpath.health"]
        budget = float(probe["exec"]["command"][probe["exec"]["command"].index("--timeout") + 1])
        assert probe["timeoutSeconds"] >= len(ENDPOINTS) * budget, "endpoints are probed one after another"
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300, "model load + warmup needs minutes"


@pytest.mark.parametrize("name", [TRITON, GATEWAY])
def test_rollout_never_drops_capacity(overlay, name):
    _, k = overlay
    spec = k.one("Deployment", name)["spec"]
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert spec["strategy"]["rollingUpdate"]["maxSurge"] >= 1
    assert k.one("PodDisruptionBudget", name)["spec"]["maxUnavailable"] == 1
    hpa = k.one("HorizontalPodAutoscaler", name)["spec"]
    assert hpa["minReplicas"] >= 2 and hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                                                  "name": name}
    pod = spec["template"]["spec"]
    drain = 30 if name == TRITON else 0   # Triton's --exit-timeout-secs
    pre_stop = pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] > drain + pre_stop


def test_selectors_match_the_pods(overlay):
    """Every Service and PDB selects the pods of exactly one Deployment; gRPC ports say so."""
    _, k = overlay
    pods = {name: t["metadata"]["labels"] for name, t in pod_templates(k["Deployment"])}
    selectors = [s["spec"]["selector"] for s in k["Service"]]
    selectors += [p["spec"]["selector"] for p in k["PodDisruptionBudget"]]
    for sel in selectors:
        assert len([w for w, labels in pods.items() if selects(sel, labels)]) == 1, sel
    grpc = [p for s in k["Service"] for p in s["spec"]["ports"] if p["name"] == "grpc"]
    assert grpc and all(p["appProtocol"] == "grpc" for p in grpc)


def test_gateway_calls_the_internal_services(overlay):
    """The gateway's upstreams are Services of this overlay, on ports they serve, in front of the triton pods;
    its Redis is deploy/redis's Service."""
    _, k = overlay
    args = k.container(GATEWAY, "gateway")["args"]
    upstreams = [args[i + 1] for i, a in enumerate(args) if a.endswith("-upstream")]
    assert {a for a in args if a.endswith("-upstream")} == {"--grpc-upstream", "--http-upstream", "--openai-upstream"}
    triton = k.one("Deployment", TRITON)["spec"]["template"]
    for upstream in upstreams:
        host, port = upstream.split(":")
        service = k.one("Service", host)["spec"]
        assert service.get("type", "ClusterIP") == "ClusterIP" and service.get("clusterIP") != "None", upstream
        assert selects(service["selector"], triton["metadata"]["labels"])
        (target,) = [p["targetPort"] for p in service["ports"] if p["port"] == int(port)]
        assert target in {p["name"] for c in triton["spec"]["containers"] for p in c["ports"]}
    env = {e["name"]: e.get("value") for e in k.container(GATEWAY, "gateway")["env"]}
    host, port = re.match(r"redis://([^:/]+):(\d+)/\d+$", env["HOTPATH_REDIS_URL"]).groups()
    redis = named(kustomize(DEPLOY / "redis"), "Service", host)["spec"]
    assert int(port) in {p["port"] for p in redis["ports"]}


def test_tenants_come_from_a_secret_that_is_not_shipped(overlay):
    """Mounted as a folder (a subPath mount never sees the Secret change), readable by the gateway's group only;
    no Secret in deploy/: tokens are never in git."""
    _, k = overlay
    pod = k.pod(GATEWAY)
    env = {e["name"]: e.get("value") for e in k.container(GATEWAY, "gateway")["env"]}
    (mount,) = [m for m in k.container(GATEWAY, "gateway")["volumeMounts"] if m["mountPath"] == "/etc/hotpath/tenants"]
    assert mount["readOnly"] and "subPath" not in mount
    assert env["HOTPATH_TENANTS_FILE"] == "/etc/hotpath/tenants/tenants.toml"
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "hotpath-tenants" and volume["secret"]["defaultMode"] == 0o440
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"] == 10001
    assert "Secret" not in k
    for path in ("redis", "prometheus-adapter"):
        assert all(d["kind"] != "Secret" for d in kustomize(DEPLOY / path))


def test_pods_run_unprivileged(overlay):
    _, k = overlay
    for name, template in pod_templates(k["Deployment"]):
        context = template["spec"]["securityContext"]
        assert context["runAsNonRoot"] and context["seccompProfile"]["type"] == "RuntimeDefault", name
        for c in template["spec"]["containers"]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, (name, c["name"])
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"], (name, c["name"])


def test_gateway_probes_and_scrape_use_the_status_port(overlay):
    _, k = overlay
    template = k.one("Deployment", GATEWAY)["spec"]["template"]
    container = k.container(GATEWAY, "gateway")
    status = {p["name"]: p["containerPort"] for p in container["ports"]}["status"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "status"}
    assert template["metadata"]["annotations"]["prometheus.io/port"] == str(status)
    # Not job "hotpath": its rules expect Triton's metrics from every pod they scrape (docs/operations.md).
    assert template["metadata"]["labels"]["app.kubernetes.io/name"] != "hotpath"


def test_volumes(overlay):
    _, k = overlay
    pod = k.pod(TRITON)
    mounts = {m["mountPath"]: m for m in k.container(TRITON, "triton")["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["/models"]["readOnly"]
    claim = volumes[mounts["/models"]["name"]]["persistentVolumeClaim"]["claimName"]
    assert claim in {p["metadata"]["name"] for p in k["PersistentVolumeClaim"]}
    assert volumes[mounts["/dev/shm"]["name"]]["emptyDir"]["medium"] == "Memory"
    # The gateway reads the same repository (public endpoints, build stamps), not its image's copy.
    gateway = {m["mountPath"]: m for m in k.container(GATEWAY, "gateway")["volumeMounts"]}
    gateway_volumes = {v["name"]: v for v in k.pod(GATEWAY)["volumes"]}
    assert gateway["/models"]["readOnly"]
    assert gateway_volumes[gateway["/models"]["name"]]["persistentVolumeClaim"]["claimName"] == claim


def test_gpu_overlay_requests_a_gpu_and_cpu_does_not(overlay):
    profile, k = overlay
    container = k.container(TRITON, "triton")
    assert "nvidia.com/gpu" not in k.container(GATEWAY, "gateway")["resources"]["limits"]
    assert "nodeSelector" not in k.pod(GATEWAY), "the gateway needs no GPU node"
    gpus = container["resources"]["limits"].get("nvidia.com/gpu")
    assert (gpus == 1) if profile == "gpu" else gpus is None
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HOTPATH_PERF_PROFILE"] == profile


def test_hpa_scales_on_the_adapter_metric_at_the_slo_budget(overlay):
    profile, k = overlay
    (metric,) = k.one("HorizontalPodAutoscaler", TRITON)["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == METRIC
    budget = min(queue_budget_ms(e.p95_ms) for e in load_endpoints(profile))
    assert float(metric["pods"]["target"]["averageValue"]) == budget
    adapter = yaml.safe_load((DEPLOY / "prometheus-adapter" / "config.yaml").read_text())
    assert [r["name"]["as"] for r in adapter["rules"]] == [METRIC]
    query = adapter["rules"][0]["metricsQuery"]
    assert "<<.LabelMatchers>>" in query and "<<.GroupBy>>" in query
