"""Rendering, linting and validating the Helm chart with the real Helm (helm-python-sdk).

`render()` returns the manifests as parsed objects; `validate()` checks each against the
Kubernetes OpenAPI schemas (kubernetes-validate, strict: unknown fields fail). Prometheus
Operator objects have no schema there: the tests assert their fields themselves.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "agent-sidecar"
CI_VALUES = CHART / "ci"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
RELEASE = "agent-sidecar"
NAMESPACE = "agents"
# A current Kubernetes release, and the first with native sidecars on by default.
KUBE_CURRENT = kubernetes_validate.utils.latest_version()
KUBE_NATIVE_SIDECARS = "1.29.0"
CRD_KINDS = frozenset({"PodMonitor", "ServiceMonitor", "PrometheusRule"})
NOTES = "templates/NOTES.txt"
PATCH_START = "# --- agent-sidecar-patch.yaml ---"
PATCH_END = "# --- end ---"


@dataclass
class Rendered:
    manifests: list[dict[str, Any]]
    notes: str

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.manifests if m["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [m for m in self.of_kind(kind) if name is None or m["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, got {[m['metadata']['name'] for m in found]}"
        return found[0]

    def kinds(self) -> list[str]:
        return sorted(m["kind"] for m in self.manifests)

    def patch(self) -> dict[str, Any]:
        """The strategic-merge patch the install notes print (sidecar mode)."""
        start = self.notes.index(PATCH_START) + len(PATCH_START)
        patch = yaml.safe_load(self.notes[start : self.notes.index(PATCH_END)])
        assert isinstance(patch, dict)
        return patch


def values_file(name: str) -> dict[str, Any]:
    loaded = yaml.safe_load((CI_VALUES / name).read_text())
    assert isinstance(loaded, dict)
    return loaded


def ci_values_files() -> list[str]:
    return sorted(p.name for p in CI_VALUES.glob("*-values.yaml"))


def render(values: dict[str, Any] | None = None, chart: Path = CHART, name: str = RELEASE) -> Rendered:
    with helm.Chart.load(chart) as loaded:
        out = loaded.render(values=values or {}, name=name, namespace=NAMESPACE, is_install=True)
    manifests: list[dict[str, Any]] = []
    notes = ""
    for path, text in sorted(out.items()):
        if path.endswith(NOTES):
            notes = text
            continue
        manifests.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return Rendered(manifests, notes)


def lint(values: dict[str, Any] | None = None, kube_version: str = KUBE_CURRENT) -> list[str]:
    """Helm's lint, strict (warnings count): the problems it reports, [] when clean."""
    report = helm.lint(CHART, values or {}, strict=True, namespace=NAMESPACE, kube_version=f"v{kube_version}")
    problems = [f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= 2]
    return problems + list(report["errors"])


def validate(manifest: dict[str, Any], kube_version: str = KUBE_CURRENT) -> None:
    """Raises when the manifest does not match the Kubernetes schema of `kube_version`."""
    kubernetes_validate.validate(manifest, kube_version, strict=True)


def validate_all(rendered: Rendered, kube_version: str = KUBE_CURRENT) -> None:
    for manifest in rendered.manifests:
        if manifest["kind"] not in CRD_KINDS:
            validate(manifest, kube_version)


def agent_chart(tmp_path: Path) -> Path:
    """The example agent chart with this chart vendored as its dependency (as `helm dependency
    build` leaves it: under charts/)."""
    target = tmp_path / "support-agent"
    shutil.copytree(FIXTURES / "agent-chart", target)
    shutil.copytree(CHART, target / "charts" / "agent-sidecar")
    return target


def containers(pod_spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every container of a pod spec by name, init containers included."""
    every = pod_spec.get("initContainers") or []
    every = every + pod_spec["containers"]
    return {c["name"]: c for c in every}
