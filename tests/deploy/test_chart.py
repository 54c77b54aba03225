"""The Helm chart, rendered by the real Helm: lint, Kubernetes schema validation, the schema's
refusals, and the parts that matter (probes, security context, policies, native sidecar)."""

from __future__ import annotations

import base64
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from sidecar.admin.auth import AdminAuth
from sidecar.config import Settings, load_settings
from sidecar.policy.sources import init_directory
from sidecar.telemetry.metrics import TOOL_BUCKETS
from tests.deploy.chart import (
    CHART,
    KUBE_CURRENT,
    KUBE_NATIVE_SIDECARS,
    NAMESPACE,
    REPO,
    Rendered,
    agent_chart,
    ci_values_files,
    containers,
    lint,
    render,
    validate,
    validate_all,
    values_file,
)

# The repository's shipped policy library, which the chart carries a copy of (Helm reads only
# files inside the chart). The one place to repoint when the library moves.
CHART_LIBRARY = CHART / "files" / "policies"
# The packaged policies the chart carries (policy.library), as `sidecar policy init` writes them.
LIBRARIES = {"builtin": None, "support": "support"}


def packaged_policy(name: str, tmp: Path) -> dict[str, bytes]:
    """The files `sidecar policy init DIR [--example NAME]` writes for one packaged policy."""
    init_directory(tmp / name, LIBRARIES[name])
    return {p.name: p.read_bytes() for p in (tmp / name).iterdir()}


VALUES = ["default", *ci_values_files()]


def _values(name: str) -> dict[str, Any]:
    return {} if name == "default" else values_file(name)


def _config(rendered: Rendered, tmp_path: Path) -> Any:
    """The rendered config file, loaded by the sidecar's own settings loader."""
    [configmap] = [m for m in rendered.of_kind("ConfigMap") if m["metadata"]["name"].endswith("-config")]
    path = tmp_path / "config.yaml"
    path.write_text(configmap["data"]["config.yaml"])
    return load_settings(config_file=path, environ={})


def _pod_from_patch(rendered: Rendered) -> dict[str, Any]:
    """A Deployment as `kubectl patch` leaves an agent Deployment after the printed patch."""
    patch = rendered.patch()["spec"]["template"]
    spec = patch["spec"]
    agent = {"name": "agent", "image": "registry.example.com/agent:1"}
    merged_containers = []
    for container in spec["containers"]:
        if container["name"] == "agent":
            merged_containers.append({**agent, **container})
        else:
            merged_containers.append(container)
    pod_spec = {**spec, "containers": merged_containers}
    labels = {"app": "agent", **patch["metadata"]["labels"]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "agent", "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


# ------------------------------------------------------------------------------ every values file


@pytest.mark.parametrize("name", VALUES)
def test_lints_clean(name):
    assert lint(_values(name)) == []


@pytest.mark.parametrize("name", VALUES)
def test_renders_valid_manifests(name, tmp_path):
    rendered = render(_values(name))
    validate_all(rendered)
    assert rendered.of_kind("ConfigMap"), "the config and policies ConfigMaps are always rendered"
    if rendered.of_kind("Deployment"):
        assert name.startswith(("gateway", "monitoring", "networkpolicy"))
    else:
        validate(_pod_from_patch(rendered))  # sidecar mode: the patched agent Deployment


@pytest.mark.parametrize("name", VALUES)
def test_config_file_is_accepted_by_the_sidecar(name, tmp_path):
    values = _values(name)
    settings = _config(render(values), tmp_path)
    gateway = values.get("mode") == "gateway"
    assert settings.listen == ("0.0.0.0:8080" if gateway else "127.0.0.1:8080")
    assert settings.admin_listen == "0.0.0.0:9477"
    assert settings.policy.engine == values.get("policy", {}).get("engine", "embedded")
    assert settings.state.backend == values.get("state", {}).get("backend", "memory")
    for key, value in values.get("config", {}).get("enforcement", {}).items():
        assert getattr(settings.enforcement, key) == value


# ------------------------------------------------------------------------------ sidecar mode


def test_default_values_render_the_shared_objects_only():
    rendered = render()
    assert rendered.kinds() == ["ConfigMap", "ConfigMap"]
    assert "the approval endpoints refuse every request" in rendered.notes


@pytest.mark.parametrize("library", sorted(LIBRARIES))
def test_policies_configmap_is_the_packaged_policy_without_its_tests(library, tmp_path):
    rendered = render({"policy": {"library": library}})
    [policies] = [m for m in rendered.of_kind("ConfigMap") if m["metadata"]["name"] == "agent-sidecar-policies"]
    packaged = packaged_policy(library, tmp_path)
    assert policies["data"] == {n: b.decode() for n, b in packaged.items() if not n.endswith("_test.rego")}


@pytest.mark.parametrize("library", sorted(LIBRARIES))
def test_chart_carries_an_exact_copy_of_the_packaged_policies(library, tmp_path):
    """Helm reads only files inside the chart: files/policies/<name>/ must equal `policy init`."""
    packaged = packaged_policy(library, tmp_path)
    copy = {p.name: p.read_bytes() for p in (CHART_LIBRARY / library).iterdir() if p.is_file()}
    example = "" if library == "builtin" else f" --example {library}"
    fix = f"sidecar policy init {CHART_LIBRARY / library} --force{example}"
    assert copy == packaged, f"the chart's copy is stale: {fix}"


def test_policy_files_replace_library_files(tmp_path):
    rendered = render(values_file("sidecar-values.yaml"))
    [policies] = [m for m in rendered.of_kind("ConfigMap") if m["metadata"]["name"].endswith("-policies")]
    assert json.loads(policies["data"]["data.json"]) == {"sidecar": {"tools": {"search": {"side_effects": False}}}}
    assert policies["data"]["sidecar.rego"] == packaged_policy("builtin", tmp_path)["sidecar.rego"].decode()


def test_an_existing_policies_configmap_is_mounted_instead():
    rendered = render({"policy": {"existingConfigMap": "team-policies"}})
    assert [m["metadata"]["name"] for m in rendered.of_kind("ConfigMap")] == ["agent-sidecar-config"]
    volumes = {v["name"]: v for v in rendered.patch()["spec"]["template"]["spec"]["volumes"]}
    assert volumes["agent-sidecar-policies"]["configMap"]["name"] == "team-policies"


def _assert_sidecar_container(container: dict[str, Any]) -> None:
    assert container["startupProbe"]["httpGet"] == {"path": "/readyz", "port": "sidecar-admin"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "sidecar-admin"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "sidecar-admin"}
    assert container["ports"][-1] == {"name": "sidecar-admin", "containerPort": 9477, "protocol": "TCP"}
    assert container["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["agent-sidecar-policies"] == {
        "name": "agent-sidecar-policies",
        "mountPath": "/etc/agent-sidecar/policies",
        "readOnly": True,
    }
    assert container["args"][:4] == [
        "--config",
        "/etc/agent-sidecar/config/config.yaml",
        "--policies",
        "/etc/agent-sidecar/policies",
    ]
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]


def test_native_sidecar_shape():
    rendered = render(values_file("native-sidecar-values.yaml"))
    spec = rendered.patch()["spec"]["template"]["spec"]
    [sidecar] = spec["initContainers"]
    assert sidecar["name"] == "agent-sidecar" and sidecar["restartPolicy"] == "Always"
    _assert_sidecar_container(sidecar)
    assert sidecar["args"][4:] == ["--admin-token-file", "/etc/agent-sidecar/admin/tokens"]
    assert [c["name"] for c in spec["containers"]] == ["agent"]
    assert spec["containers"][0]["env"] == [
        {"name": "ANTHROPIC_BASE_URL", "value": "http://127.0.0.1:8080"},
        {"name": "OPENAI_BASE_URL", "value": "http://127.0.0.1:8080/v1"},
    ]
    assert spec["terminationGracePeriodSeconds"] == 35
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["agent-sidecar-admin-tokens"]["secret"]["secretName"] == "agent-sidecar-tokens"
    for version in (KUBE_NATIVE_SIDECARS, KUBE_CURRENT):
        validate(_pod_from_patch(rendered), version)


def test_native_sidecar_by_default_on_current_clusters():
    spec = render().patch()["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["agent-sidecar"]


def test_plain_container_below_kubernetes_1_29():
    rendered = render(values_file("plain-sidecar-values.yaml"))
    spec = rendered.patch()["spec"]["template"]["spec"]
    assert "initContainers" not in spec
    agent, sidecar = spec["containers"]
    assert agent["name"] == "agent" and sidecar["name"] == "agent-sidecar"
    assert "restartPolicy" not in sidecar
    _assert_sidecar_container(sidecar)
    validate(_pod_from_patch(rendered), "1.28.0")


def test_an_agent_chart_includes_the_sidecar(tmp_path):
    rendered = render(chart=agent_chart(tmp_path), name="support")
    validate_all(rendered)
    deployment = rendered.one("Deployment", "support")
    template = deployment["spec"]["template"]
    assert template["metadata"]["labels"]["agent-sidecar/instance"] == "support-agent-sidecar"
    assert template["metadata"]["annotations"]["checksum/agent-sidecar-config"]
    by_name = containers(template["spec"])
    assert [c["name"] for c in template["spec"]["initContainers"]] == ["agent-sidecar"]
    _assert_sidecar_container(by_name["agent-sidecar"])
    assert by_name["agent"]["env"][0] == {"name": "ANTHROPIC_BASE_URL", "value": "http://127.0.0.1:8080"}
    # The volumes name the objects the dependency rendered in the same release.
    configmaps = {m["metadata"]["name"] for m in rendered.of_kind("ConfigMap")}
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    assert volumes["agent-sidecar-config"]["configMap"]["name"] in configmaps
    assert volumes["agent-sidecar-policies"]["configMap"]["name"] in configmaps
    assert volumes["agent-sidecar-admin-tokens"]["secret"]["secretName"] == "support-agent-approvers"


def test_docs_show_the_tested_agent_chart_template():
    docs = (REPO / "docs" / "kubernetes.md").read_text()
    template = (Path(__file__).parent / "fixtures" / "agent-chart" / "templates" / "deployment.yaml").read_text()
    assert template in docs, "docs/kubernetes.md must show tests/deploy/fixtures/agent-chart's deployment.yaml"


def test_admin_tokens_secret_holds_identities_and_groups(tmp_path):
    rendered = render(values_file("sidecar-values.yaml"))
    secret = rendered.one("Secret")
    assert base64.b64decode(secret["data"]["tokens"]).decode() == (
        "approver-token-0123456789abcdef alice support-leads,finance-approvers\n"
        "oncall-token-0123456789abcdef0 oncall operators\n"
    )
    # The sidecar reads that file as those approvers.
    mounted = tmp_path / "tokens"
    mounted.write_bytes(base64.b64decode(secret["data"]["tokens"]))
    auth = AdminAuth(Settings(admin_token_file=str(mounted)))
    alice = auth.check("Bearer approver-token-0123456789abcdef").approver
    oncall = auth.check("Bearer oncall-token-0123456789abcdef0").approver
    assert alice is not None and (alice.name, alice.groups) == ("alice", {"support-leads", "finance-approvers"})
    assert oncall is not None and (oncall.name, oncall.groups) == ("oncall", {"operators"})
    spec = rendered.patch()["spec"]["template"]["spec"]
    sidecar = containers(spec)["agent-sidecar"]
    assert sidecar["args"][4:] == ["--admin-token-file", "/etc/agent-sidecar/admin/tokens"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["agent-sidecar-admin-tokens"]["secret"]["secretName"] == secret["metadata"]["name"]


def test_opa_container_on_the_same_policies():
    rendered = render(values_file("opa-values.yaml"))
    spec = rendered.patch()["spec"]["template"]["spec"]
    opa, sidecar = spec["initContainers"]  # OPA first: started (healthy) before the sidecar and the agent
    assert opa["name"] == "opa" and opa["restartPolicy"] == "Always"
    assert re.fullmatch(r"openpolicyagent/opa:\d+\.\d+\.\d+-static", opa["image"])
    assert opa["args"][:4] == ["run", "--server", "--addr=127.0.0.1:8181", "--diagnostic-addr=0.0.0.0:8282"]
    assert {"--watch", "--ignore=.*", "--ignore=*_test.rego"} <= set(opa["args"])
    assert opa["args"][-1] == "/policies"
    assert opa["volumeMounts"] == [{"name": "agent-sidecar-policies", "mountPath": "/policies", "readOnly": True}]
    assert opa["readinessProbe"]["httpGet"] == {"path": "/health", "port": "opa-diag"}
    assert opa["securityContext"]["readOnlyRootFilesystem"] is True
    _assert_sidecar_container(sidecar)
    [configmap] = [m for m in rendered.of_kind("ConfigMap") if m["metadata"]["name"].endswith("-config")]
    config = yaml.safe_load(configmap["data"]["config.yaml"])
    assert config["policy"] == {"engine": "opa", "opa_url": "http://127.0.0.1:8181"}
    plain = render({**values_file("opa-values.yaml"), "sidecar": {"nativeSidecar": False}})
    assert [c["name"] for c in plain.patch()["spec"]["template"]["spec"]["containers"]] == [
        "agent",
        "agent-sidecar",
        "opa",
    ]


# ------------------------------------------------------------------------------ gateway mode


def test_gateway_mode_with_redis(tmp_path):
    rendered = render(values_file("gateway-redis-values.yaml"))
    assert rendered.kinds() == [
        "ConfigMap",
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "Service",
        "Service",
        "ServiceAccount",
    ]
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["terminationGracePeriodSeconds"] == 35
    [sidecar] = pod["containers"]
    _assert_sidecar_container(sidecar)
    assert "restartPolicy" not in sidecar
    assert sidecar["args"][-4:] == ["--admin-token-file", "/etc/agent-sidecar/admin/tokens", "--workers", "2"]
    assert {"name": "sidecar-proxy", "containerPort": 8080, "protocol": "TCP"} in sidecar["ports"]
    assert {
        "name": "SIDECAR_STATE__REDIS_URL",
        "valueFrom": {"secretKeyRef": {"name": "agent-sidecar-redis", "key": "url"}},
    } in sidecar["env"]
    assert sidecar["resources"]["requests"]["cpu"] == "2"
    hpa = rendered.one("HorizontalPodAutoscaler")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 10)
    assert hpa["metrics"][0]["resource"]["target"] == {"type": "Utilization", "averageUtilization": 70}
    assert "replicas" not in rendered.one("Deployment")["spec"], "the HPA owns the replica count"
    assert rendered.one("PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    proxy = rendered.one("Service", "agent-sidecar")["spec"]
    admin = rendered.one("Service", "agent-sidecar-admin")["spec"]
    assert proxy["ports"] == [{"name": "proxy", "port": 8080, "targetPort": "sidecar-proxy", "protocol": "TCP"}]
    assert admin["ports"] == [{"name": "admin", "port": 9477, "targetPort": "sidecar-admin", "protocol": "TCP"}]
    assert "ANTHROPIC_BASE_URL=http://agent-sidecar.agents.svc:8080" in rendered.notes
    assert _config(rendered, tmp_path).state.backend == "redis"


def test_workers_flag_only_above_one():
    values = values_file("gateway-redis-values.yaml")
    values["gateway"]["workers"] = 1
    [sidecar] = render(values).one("Deployment")["spec"]["template"]["spec"]["containers"]
    assert "--workers" not in sidecar["args"]


# ------------------------------------------------------------------------------ monitoring


def test_monitoring_in_gateway_mode():
    rendered = render(values_file("monitoring-values.yaml"))
    monitor = rendered.one("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "agent-sidecar",
        "app.kubernetes.io/instance": "agent-sidecar",
        "app.kubernetes.io/component": "admin",
    }
    assert monitor["spec"]["endpoints"] == [
        {"port": "admin", "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s"}
    ]
    assert (
        rendered.one("Service", "agent-sidecar-admin")["metadata"]["labels"]["app.kubernetes.io/component"] == "admin"
    )
    assert not rendered.of_kind("PodMonitor")
    rule = rendered.one("PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    exprs = {r.get("alert") or r["record"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert "(14.4 * (1 - 0.995))" in exprs["SidecarToolErrorBudgetBurn"]
    assert "(14.4 * (1 - 0.9))" in exprs["SidecarToolLatencyBudgetBurn"]
    assert 'le=~"2\\\\.5(\\\\.0)?"' in exprs["namespace_tool:sidecar_tool_slow_calls:ratio_rate5m"]


def test_monitoring_in_sidecar_mode_scrapes_the_agent_pods():
    rendered = render({"monitoring": {"enabled": True, "prometheusOperator": True}})
    monitor = rendered.one("PodMonitor")["spec"]
    assert monitor["selector"] == {"matchLabels": {"agent-sidecar/instance": "agent-sidecar"}}
    assert monitor["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert monitor["podMetricsEndpoints"] == [
        {"port": "sidecar-admin", "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s"}
    ]
    labels = rendered.patch()["spec"]["template"]["metadata"]["labels"]
    assert labels == monitor["selector"]["matchLabels"], "the patched agent pods carry the PodMonitor's label"
    assert not rendered.of_kind("ServiceMonitor")


def test_dashboards_configmaps_for_grafanas_sidecar():
    rendered = render({"monitoring": {"enabled": True, "prometheusOperator": True}})
    dashboards = [m for m in rendered.of_kind("ConfigMap") if "grafana_dashboard" in m["metadata"]["labels"]]
    shipped = {p.name: p.read_text().strip() for p in (REPO / "dashboards").glob("*.json")}
    assert len(dashboards) == len(shipped) >= 2
    for configmap in dashboards:
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert configmap["metadata"]["annotations"] == {"grafana_folder": "Agent sidecar"}
        [(key, text)] = configmap["data"].items()
        assert text == shipped[key], f"{key} in the chart differs from dashboards/{key}"


def test_chart_dashboards_are_copies_of_the_repository_dashboards():
    repo = {p.name: p.read_bytes() for p in (REPO / "dashboards").glob("*.json")}
    copy = {p.name: p.read_bytes() for p in (CHART / "files" / "dashboards").glob("*.json")}
    assert copy == repo, "copy dashboards/*.json to helm/agent-sidecar/files/dashboards/"


def test_operator_objects_need_the_crds_or_an_explicit_switch():
    """render() reports no monitoring.coreos.com API, as `helm template` without --api-versions."""
    rendered = render({"monitoring": {"enabled": True}})
    assert not {"PodMonitor", "ServiceMonitor", "PrometheusRule"} & set(rendered.kinds())
    assert any("grafana_dashboard" in m["metadata"]["labels"] for m in rendered.of_kind("ConfigMap"))
    assert not render({"monitoring": {"enabled": False, "prometheusOperator": True}}).of_kind("PodMonitor")


# ------------------------------------------------------------------------------ network policy


def test_network_policy_allows_egress_to_the_upstreams_only():
    rendered = render(values_file("networkpolicy-values.yaml"))
    policy = rendered.one("NetworkPolicy")["spec"]
    assert policy["podSelector"] == {"matchLabels": {"agent-sidecar/instance": "agent-sidecar"}}
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    upstream, dns = policy["egress"]
    assert upstream["ports"] == [{"port": 443, "protocol": "TCP"}, {"port": 8000, "protocol": "TCP"}]
    assert upstream["to"] == values_file("networkpolicy-values.yaml")["networkPolicy"]["upstreamPeers"]
    assert dns["ports"] == [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
    admin, proxy = policy["ingress"]
    assert admin["ports"] == [{"port": 9477, "protocol": "TCP"}]
    assert admin["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert proxy == {"ports": [{"port": 8080, "protocol": "TCP"}]}
    gateway_pods = rendered.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert gateway_pods["agent-sidecar/instance"] == "agent-sidecar"


def test_network_policy_allows_redis_when_its_peers_are_named():
    values = values_file("gateway-redis-values.yaml")
    values["networkPolicy"] = {
        "enabled": True,
        "redis": {"peers": [{"podSelector": {"matchLabels": {"app": "redis"}}}]},
    }
    egress = render(values).one("NetworkPolicy")["spec"]["egress"]
    assert egress[-1] == {
        "to": [{"podSelector": {"matchLabels": {"app": "redis"}}}],
        "ports": [{"port": 6379, "protocol": "TCP"}],
    }


# ------------------------------------------------------------------------------ refusals

BAD_VALUES = [
    ({"mode": "daemonset"}, "/mode"),
    ({"modee": "sidecar"}, "modee"),
    ({"proxy": {"port": "8080x"}}, "/proxy/port"),
    ({"proxy": {"port": 70000}}, "/proxy/port"),
    ({"upstreams": {"openai": "api.openai.com"}}, "/upstreams/openai"),
    ({"policy": {"engine": "cedar"}}, "/policy/engine"),
    ({"state": {"backend": "redis"}}, "/state/redis/existingSecret"),
    ({"config": {"listen": "0.0.0.0:1"}}, "/config/listen"),
    ({"config": {"state": {"backend": "redis"}}}, "/config/state/backend"),
    ({"adminTokens": {"tokens": [{"token": "short", "name": "a", "groups": ["g"]}]}}, "/adminTokens/tokens/0/token"),
    ({"adminTokens": {"tokens": [{"token": "0123456789abcdefgh", "name": "a b", "groups": ["g"]}]}}, "/name"),
    ({"adminTokens": {"tokens": [{"token": "#0123456789abcdefgh", "name": "a", "groups": ["g"]}]}}, "/token"),
    ({"sidecar": {"nativeSidecar": "maybe"}}, "/sidecar/nativeSidecar"),
    ({"gateway": {"workers": 0}}, "/gateway/workers"),
    ({"monitoring": {"prometheusRule": {"slo": {"toolLatencySeconds": "7"}}}}, "toolLatencySeconds"),
    ({"monitoring": {"prometheusRule": {"slo": {"toolSuccessObjective": 1.5}}}}, "toolSuccessObjective"),
    ({"image": {"digest": "sha256:short"}}, "/image/digest"),
]


@pytest.mark.parametrize(("values", "where"), BAD_VALUES, ids=[w for _, w in BAD_VALUES])
def test_schema_rejects_bad_values(values, where):
    with pytest.raises(helm.HelmValuesError, match=re.escape(where)):
        render(values)
    assert any(where in problem for problem in lint(values))


INCONSISTENT = [
    ({"mode": "gateway"}, "needs state.backend=redis"),
    ({"terminationGracePeriodSeconds": 20}, "must exceed the sidecar's drain grace"),
    ({"config": {"shutdown_grace_s": 40}}, "must exceed the sidecar's drain grace"),
    ({"gateway": {"workers": 4}}, "gateway.workers applies to gateway mode only"),
    (
        {"mode": "gateway", "gateway": {"replicas": 1, "autoscaling": {"enabled": False}, "workers": 2}},
        "gateway.workers above 1 needs state.backend=sqlite or redis",
    ),
]


@pytest.mark.parametrize(("values", "message"), INCONSISTENT, ids=[m for _, m in INCONSISTENT])
def test_inconsistent_values_fail_at_render(values, message):
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render(values)


def test_latency_thresholds_are_the_histogram_buckets():
    """The latency SLO reads one bucket of sidecar_tool_call_duration_seconds: only its bounds."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    slo = schema["properties"]["monitoring"]["properties"]["prometheusRule"]["properties"]["slo"]
    assert slo["properties"]["toolLatencySeconds"]["enum"] == [f"{b:g}" for b in TOOL_BUCKETS]


def test_versions_agree():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == project


def test_every_value_is_documented():
    """Each key in values.yaml, or a mapping above it, has a comment right above it."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    documented: list[tuple[int, bool]] = []  # (indent, documented) of the open mappings
    missing = []
    for number, line in enumerate(lines):
        match = re.match(r"^( *)([A-Za-z_][\w.-]*):", line)
        if not match:
            continue
        indent = len(match.group(1))
        documented = [(i, d) for i, d in documented if i < indent]
        previous = next((p for p in reversed(lines[:number]) if p.strip()), "")
        here = previous.strip().startswith("#")
        if not here and not any(d for _, d in documented) and not line.rstrip().endswith(":"):
            missing.append(line.strip())
        documented.append((indent, here))
    assert not missing, f"undocumented values: {missing}"


def test_the_documented_slack_values_give_the_sidecar_complete_slack_settings(tmp_path):
    """docs/kubernetes.md's Slack snippet: secrets from a Secret (env), the users file mounted,
    the rest in the config file; together, the settings the sidecar loads."""
    docs = (REPO / "docs" / "kubernetes.md").read_text()
    block = docs[docs.index("**Slack approvals**") :]
    match = re.search(r"```yaml\n(.*?)```", block, re.S)
    assert match is not None
    rendered = render(yaml.safe_load(match.group(1)))
    spec = rendered.patch()["spec"]["template"]["spec"]
    sidecar = containers(spec)["agent-sidecar"]
    secrets = {
        e["name"]: e["valueFrom"]["secretKeyRef"] for e in sidecar["env"] if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert set(secrets) == {"SIDECAR_APPROVALS__SLACK__SIGNING_SECRET", "SIDECAR_APPROVALS__SLACK__BOT_TOKEN"}
    mounts = {m["mountPath"]: m["name"] for m in sidecar["volumeMounts"]}
    assert mounts["/etc/agent-sidecar/slack"] in {v["name"] for v in spec["volumes"]}

    [configmap] = [m for m in rendered.of_kind("ConfigMap") if m["metadata"]["name"].endswith("-config")]
    path = tmp_path / "config.yaml"
    path.write_text(configmap["data"]["config.yaml"])
    environ = {name: "from-the-secret" for name in secrets}
    slack = load_settings(config_file=path, environ=environ).approvals.slack
    assert slack is not None
    assert (slack.channel, slack.users_file) == ("C0123APPROVALS", "/etc/agent-sidecar/slack/users")
    assert slack.signing_secret == slack.bot_token == "from-the-secret"
