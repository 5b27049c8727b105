"""The tenant gateway is the only public door in every deployment artifact.

Read from what is deployed: each Kubernetes overlay rendered by kustomize together with deploy/redis, and
docker/compose.yaml. Each rule is a function that lists what breaks it, and each is shown to catch the mistake
it is there for (a test publishes triton, or opens a policy, in a copy of the rendered objects):

- Kubernetes: the only Service reachable from outside the cluster (LoadBalancer, NodePort, externalIPs, or the
  backend of an Ingress or a Gateway API route) is the gateway's, with exactly the gateway's public ports; no
  pod uses hostNetwork or a hostPort; every pod is selected by a NetworkPolicy, and what those admit is: for the
  gateway, its public ports from anywhere and its status port from Prometheus; for any other pod, the hotpath
  pods that call it (the gateway; for Redis the triton pods too) and Prometheus on its metrics port only.
- compose: only `gateway` has `ports`, exactly the public ones; every other service is only on networks with
  `internal: true`; nothing uses `network_mode` (host networking, or another container's network).
"""

from __future__ import annotations

import copy
import re

import pytest

from hotpath import settings
from tests.manifests import DEPLOY, OVERLAYS, compose, kustomize, named, pod_templates, selects

PUBLIC_PORTS = {settings.gateway_http_port.default, settings.gateway_grpc_port.default,
                settings.gateway_openai_port.default}
STATUS_PORT = settings.gateway_status_port.default
GATEWAY = {"app.kubernetes.io/name": "hotpath-gateway", "app.kubernetes.io/component": "gateway"}
TRITON = {"app.kubernetes.io/name": "hotpath", "app.kubernetes.io/component": "triton"}
# Prometheus as deploy/base/networkpolicy.yaml names it: its pods, in its namespace.
PROMETHEUS = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
              "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
# hotpath's own pods that may call a pod, by the called pod's app.kubernetes.io/name.
CALLERS = {"hotpath": [GATEWAY], "hotpath-redis": [GATEWAY, TRITON]}
EXPOSED_TYPES = ("LoadBalancer", "NodePort")
ROUTE_KINDS = ("HTTPRoute", "GRPCRoute", "TCPRoute", "TLSRoute", "UDPRoute")


# --- Kubernetes ---------------------------------------------------------------------------------------------

def _is_gateway(labels: dict) -> bool:
    return selects({"matchLabels": GATEWAY}, labels)


def public_services(docs: list[dict]) -> list[str]:
    """Services reachable from outside the cluster that are not the gateway's public Service, or that publish
    other ports than its doors; Ingress and route backends other than that Service."""
    problems, exposed = [], []
    pods = [template["metadata"].get("labels", {}) for _, template in pod_templates(docs)]
    for s in (d for d in docs if d["kind"] == "Service"):
        spec, name = s["spec"], s["metadata"]["name"]
        how = [f"type {spec['type']}"] if spec.get("type") in EXPOSED_TYPES else []
        how += ["externalIPs"] if spec.get("externalIPs") else []
        if not how:
            continue
        exposed.append(name)
        chosen = [labels for labels in pods if spec.get("selector") and selects(spec["selector"], labels)]
        ports = {p["port"] for p in spec.get("ports", [])}
        if not chosen or not all(_is_gateway(labels) for labels in chosen):
            problems.append(f"Service/{name} ({', '.join(how)}) selects {spec.get('selector')}, not the gateway")
        elif ports != PUBLIC_PORTS:
            problems.append(f"Service/{name} ({', '.join(how)}) publishes ports {sorted(ports)}, "
                            f"not the gateway's doors {sorted(PUBLIC_PORTS)}")
    if len(exposed) != 1:
        problems.append(f"{len(exposed)} Services reachable from outside ({exposed}): expected the gateway's alone")
    front = exposed[0] if len(exposed) == 1 else "hotpath-gateway"
    for d in docs:
        backends = []
        if d["kind"] == "Ingress":
            spec = d["spec"]
            rules = [spec["defaultBackend"]] if spec.get("defaultBackend") else []
            rules += [p["backend"] for r in spec.get("rules", []) for p in r.get("http", {}).get("paths", [])]
            backends = [b.get("service", {}).get("name", "(a resource backend)") for b in rules]
        elif d["kind"] in ROUTE_KINDS:
            backends = [ref["name"] for r in d["spec"].get("rules", []) for ref in r.get("backendRefs", [])]
        problems += [f"{d['kind']}/{d['metadata']['name']} routes outside traffic to {b}" for b in backends
                     if b != front]
    return problems


def host_exposure(docs: list[dict]) -> list[str]:
    """Pods that bypass Services and policies: hostNetwork, or a container port bound on the node."""
    problems = []
    for where, template in pod_templates(docs):
        spec = template["spec"]
        if spec.get("hostNetwork"):
            problems.append(f"{where}: hostNetwork")
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            problems += [f"{where}: container {c['name']} binds hostPort {p['hostPort']}"
                         for p in c.get("ports", []) if p.get("hostPort")]
    return problems


def _port_numbers(rule_ports: list[dict] | None, container_ports: dict[str, int]) -> set[int] | None:
    """The ports a policy rule admits (None: every port); named ports resolved against the pod's."""
    if not rule_ports:
        return None
    out = set()
    for p in rule_ports:
        if "port" not in p:
            return None   # a protocol alone: every port
        port = container_ports.get(p["port"], p["port"]) if isinstance(p["port"], str) else p["port"]
        out |= set(range(port, p.get("endPort", port) + 1)) if isinstance(port, int) else {port}
    return out


def _metrics_ports(template: dict, container_ports: dict[str, int]) -> set[int]:
    annotated = template.get("metadata", {}).get("annotations", {}).get("prometheus.io/port")
    return ({int(annotated)} if annotated else set()) | ({container_ports["metrics"]} if "metrics" in
                                                         container_ports else set())


def _is_caller(peer: dict, callers: list[dict]) -> bool:
    """A pod of this namespace matching one of `callers`' label sets (and no broader selector)."""
    if set(peer) != {"podSelector"} or peer["podSelector"].get("matchExpressions"):
        return False
    return any(caller.items() <= (peer["podSelector"].get("matchLabels") or {}).items() for caller in callers)


def unguarded_pods(docs: list[dict]) -> list[str]:
    """Pods that a connection from outside hotpath could reach past the rules in the module docstring."""
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"
                and "Ingress" in d["spec"].get("policyTypes", ["Ingress"])]
    problems = []
    for where, template in pod_templates(docs):
        labels = template["metadata"].get("labels", {})
        container_ports = {p["name"]: p["containerPort"] for c in template["spec"]["containers"]
                           for p in c.get("ports", []) if "name" in p}
        mine = [p for p in policies if selects(p["spec"]["podSelector"], labels)]
        if not mine:
            problems.append(f"{where}: no NetworkPolicy selects its pods; any pod or address reaches them")
            continue
        gateway = _is_gateway(labels)
        callers = CALLERS.get(labels.get("app.kubernetes.io/name"), [GATEWAY])
        metrics = {STATUS_PORT} if gateway else _metrics_ports(template, container_ports)
        for policy in mine:
            for i, rule in enumerate(policy["spec"].get("ingress") or []):
                at = f"{where}: NetworkPolicy/{policy['metadata']['name']} rule {i}"
                ports = _port_numbers(rule.get("ports"), container_ports)
                shown = "every port" if ports is None else sorted(ports)
                peers = rule.get("from") or []
                if not peers:   # no `from`: every source
                    if not gateway or ports is None or not ports <= PUBLIC_PORTS:
                        problems.append(f"{at} admits any source on {shown}")
                    continue
                for peer in peers:
                    if peer == PROMETHEUS:
                        if ports is None or not ports <= metrics:
                            problems.append(f"{at} admits Prometheus on {shown}, beyond the metrics port "
                                            f"{sorted(metrics)}")
                    elif gateway or not _is_caller(peer, callers):
                        problems.append(f"{at} admits {peer} on {shown}")
    return problems


def stack(overlay: str) -> list[dict]:
    """What one deployment applies: an overlay and the fleet's Redis."""
    return kustomize(DEPLOY / "overlays" / overlay) + kustomize(DEPLOY / "redis")


@pytest.fixture(scope="module", params=OVERLAYS)
def deployed(request) -> list[dict]:
    return stack(request.param)


RULES = (public_services, host_exposure, unguarded_pods)


def test_only_the_gateway_is_reachable_from_outside_the_cluster(deployed):
    for rule in RULES:
        assert rule(deployed) == [], rule.__name__
    (public,) = [s for s in deployed if s["kind"] == "Service" and s["spec"].get("type") in EXPOSED_TYPES]
    assert public["metadata"]["name"] == "hotpath-gateway"
    assert {p["port"] for p in public["spec"]["ports"]} == PUBLIC_PORTS
    assert all(s["spec"].get("type", "ClusterIP") == "ClusterIP" for s in deployed
               if s["kind"] == "Service" and s is not public)


def _service(docs, name):
    return named(docs, "Service", name)["spec"]


def _policy(docs, name):
    return named(docs, "NetworkPolicy", name)["spec"]


def _container(docs, deployment, container):
    (c,) = [c for c in named(docs, "Deployment", deployment)["spec"]["template"]["spec"]["containers"]
            if c["name"] == container]
    return c


def _ingress_to(service, port):
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "extra"},
            "spec": {"rules": [{"http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {
                "service": {"name": service, "port": {"number": port}}}}]}}]}}


def _open_policy(selector):
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "extra"},
            "spec": {"podSelector": selector, "ingress": [{}]}}


# (what the mutation does, the rule that must catch it, the mutation)
K8S_MISTAKES = [
    ("triton's Service as a LoadBalancer", public_services,
     lambda d: _service(d, "hotpath").update(type="LoadBalancer")),
    ("the OpenAI API's Service as a NodePort", public_services,
     lambda d: _service(d, "hotpath-openai").update(type="NodePort")),
    ("externalIPs on triton's Service", public_services,
     lambda d: _service(d, "hotpath").update(externalIPs=["203.0.113.7"])),
    ("Redis's Service as a LoadBalancer", public_services,
     lambda d: _service(d, "hotpath-redis").update(type="LoadBalancer")),
    ("the gateway's status port published", public_services,
     lambda d: _service(d, "hotpath-gateway")["ports"].append({"name": "status", "port": STATUS_PORT})),
    ("the public Service selecting triton pods", public_services,
     lambda d: _service(d, "hotpath-gateway").update(selector=dict(TRITON))),
    ("an Ingress in front of triton's HTTP port", public_services,
     lambda d: d.append(_ingress_to("hotpath", 8000))),
    ("an HTTPRoute to the OpenAI API", public_services,
     lambda d: d.append({"kind": "HTTPRoute", "metadata": {"name": "extra"},
                         "spec": {"rules": [{"backendRefs": [{"name": "hotpath-openai", "port": 8080}]}]}})),
    ("a hostPort on triton's gRPC port", host_exposure,
     lambda d: _container(d, "hotpath", "triton")["ports"][1].update(hostPort=8001)),
    ("hostNetwork on the gateway", host_exposure,
     lambda d: named(d, "Deployment", "hotpath-gateway")["spec"]["template"]["spec"].update(hostNetwork=True)),
    ("triton's NetworkPolicy left out", unguarded_pods,
     lambda d: d.remove(named(d, "NetworkPolicy", "hotpath-triton"))),
    ("the gateway's NetworkPolicy left out", unguarded_pods,
     lambda d: d.remove(named(d, "NetworkPolicy", "hotpath-gateway"))),
    ("Redis's NetworkPolicy left out", unguarded_pods,
     lambda d: d.remove(named(d, "NetworkPolicy", "hotpath-redis"))),
    ("triton's gateway rule without `from` (any source)", unguarded_pods,
     lambda d: _policy(d, "hotpath-triton")["ingress"][0].pop("from")),
    ("triton admitting every pod of the namespace", unguarded_pods,
     lambda d: _policy(d, "hotpath-triton")["ingress"][0]["from"].append({"podSelector": {}})),
    ("triton admitting a whole namespace", unguarded_pods,
     lambda d: _policy(d, "hotpath-triton")["ingress"][0]["from"].append({"namespaceSelector": {}})),
    ("triton admitting an address block", unguarded_pods,
     lambda d: _policy(d, "hotpath-triton")["ingress"][0]["from"].append({"ipBlock": {"cidr": "0.0.0.0/0"}})),
    ("Prometheus admitted on every triton port", unguarded_pods,
     lambda d: _policy(d, "hotpath-triton")["ingress"][1].pop("ports")),
    ("Prometheus admitted on triton's HTTP port", unguarded_pods,
     lambda d: _policy(d, "hotpath-triton")["ingress"][1]["ports"].append({"port": 8000})),
    ("a second policy opening triton pods to all", unguarded_pods,
     lambda d: d.append(_open_policy({"matchLabels": {"app.kubernetes.io/component": "triton"}}))),
    ("a namespace-wide allow-all policy", unguarded_pods, lambda d: d.append(_open_policy({}))),
    ("the gateway's status port open to any source", unguarded_pods,
     lambda d: _policy(d, "hotpath-gateway")["ingress"][0]["ports"].append({"port": STATUS_PORT})),
    ("the gateway's public rule on every port", unguarded_pods,
     lambda d: _policy(d, "hotpath-gateway")["ingress"][0].pop("ports")),
    ("Redis admitting any source", unguarded_pods,
     lambda d: _policy(d, "hotpath-redis")["ingress"][0].pop("from")),
    ("Redis admitting Prometheus (no metrics port there)", unguarded_pods,
     lambda d: _policy(d, "hotpath-redis")["ingress"][0]["from"].append(copy.deepcopy(PROMETHEUS))),
]


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    return stack(OVERLAYS[0])


@pytest.mark.parametrize("rule, mutate", [(r, m) for _, r, m in K8S_MISTAKES], ids=[m[0] for m in K8S_MISTAKES])
def test_each_kubernetes_rule_catches_its_mistake(rendered, rule, mutate):
    docs = copy.deepcopy(rendered)
    assert rule(docs) == []
    mutate(docs)
    assert rule(docs), f"{rule.__name__} let it pass"


# --- compose ------------------------------------------------------------------------------------------------

def _published(entry) -> int:
    """The container port of a `ports` entry: "H:C", "IP:H:C", "C", with "/proto", or the long syntax."""
    if isinstance(entry, dict):
        return int(entry["target"])
    return int(re.split(r"[:/]", str(entry).rsplit(":", 1)[-1])[0])


def compose_doors(doc: dict) -> list[str]:
    """Compose services reachable from outside the box other than the gateway's doors."""
    problems = []
    networks = doc.get("networks") or {}
    internal = {name for name, n in networks.items() if (n or {}).get("internal") is True}
    for name, service in doc["services"].items():
        if "network_mode" in service:
            problems.append(f"{name}: network_mode {service['network_mode']} (outside the compose networks)")
        ports = {_published(p) for p in service.get("ports") or []}
        joined = service.get("networks") or ["default"]   # none given: the project's default network
        joined = list(joined) if isinstance(joined, dict) else joined
        if name == "gateway":
            if ports != PUBLIC_PORTS:
                problems.append(f"gateway publishes {sorted(ports)}, not its doors {sorted(PUBLIC_PORTS)}")
            if not set(joined) & internal:
                problems.append("gateway is on no internal network: it cannot reach what it fronts")
            continue
        if ports:
            problems.append(f"{name} publishes {sorted(ports)}")
        problems += [f"{name} is on network {n}, which is not internal" for n in joined if n not in internal]
    return problems


COMPOSE_MISTAKES = [
    ("triton publishes its HTTP port", lambda c: c["services"]["triton"].update(ports=["8000:8000"])),
    ("the OpenAI API publishes its port (long syntax)",
     lambda c: c["services"]["openai"].update(ports=[{"target": 8080, "published": 8080}])),
    ("redis published on loopback", lambda c: c["services"]["redis"].update(ports=["127.0.0.1:6379:6379"])),
    ("the gateway publishes its status port", lambda c: c["services"]["gateway"]["ports"].append("9002:9002")),
    ("the serving network not internal", lambda c: c["networks"]["serving"].pop("internal")),
    ("redis also on the public network", lambda c: c["services"]["redis"]["networks"].append("public")),
    ("the OpenAI API on the default network", lambda c: c["services"]["openai"].pop("networks")),
    ("triton on the host's network", lambda c: c["services"]["triton"].update(network_mode="host")),
    ("the gateway off the internal network", lambda c: c["services"]["gateway"].update(networks=["public"])),
]


def test_compose_publishes_the_gateway_alone():
    doc = compose()
    assert compose_doors(doc) == []
    assert [name for name, s in doc["services"].items() if s.get("ports")] == ["gateway"]
    assert {_published(p) for p in doc["services"]["gateway"]["ports"]} == PUBLIC_PORTS
    assert STATUS_PORT not in {_published(p) for p in doc["services"]["gateway"]["ports"]}


@pytest.mark.parametrize("mutate", [m for _, m in COMPOSE_MISTAKES], ids=[n for n, _ in COMPOSE_MISTAKES])
def test_the_compose_rule_catches_each_mistake(mutate):
    doc = compose()
    mutate(doc)
    assert compose_doors(doc), "compose_doors let it pass"


def test_compose_gateway_reaches_what_it_fronts_by_service_name():
    """The gateway's upstreams and Redis are compose services on its internal network."""
    doc = compose()
    gateway = doc["services"]["gateway"]
    args = gateway["command"]
    upstreams = [args[i + 1] for i, a in enumerate(args) if a.endswith("-upstream")]
    redis = re.match(r"redis://([^:/]+):(\d+)/", gateway["environment"]["HOTPATH_REDIS_URL"])
    for host in [u.split(":")[0] for u in upstreams] + [redis.group(1)]:
        assert host in doc["services"], host
        assert set(doc["services"][host]["networks"]) & set(gateway["networks"]), host
    assert sorted(upstreams) == ["openai:8080", "triton:8000", "triton:8001"]
    mounts = [v for v in gateway["volumes"] if isinstance(v, dict) and v["target"] == "/etc/hotpath/tenants"]
    assert mounts and mounts[0]["read_only"], "tenants mounted read-only, as a folder"
    assert gateway["environment"]["HOTPATH_TENANTS_FILE"].startswith("/etc/hotpath/tenants/")
