"""The Dockerfile and the Helm chart (issue: deployment), proven without a Docker engine or a cluster:
hadolint on the image, and the chart rendered offline (helm_python, as `helm template` does), linted and
validated strictly against the Kubernetes schemas for every variant an operator is likely to use."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from app.platform.config import KEYS

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "lethe"
K8S_VERSION = "1.30.0"
SECRETS = {
    "database.url": "postgresql://lethe:pw@postgres:5432/lethe",
    "broker.url": "amqp://lethe:pw@rabbitmq:5672/",
    "auth.jwt_secret": "jwt-secret",
    "file.s3.access_key": "ak",
    "file.s3.secret_key": "sk",
}

ENDPOINT = "s3.storage.svc:9000"
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {"secrets": SECRETS},
    "fs-with-claim": {
        "secrets": SECRETS,
        "config": {"file.storage.driver": "fs"},
        "storage": {"fs": {"existingClaim": "lethe-objects"}},
    },
    "fs-created-claim": {
        "secrets": SECRETS,
        "config": {"file.storage.driver": "fs"},
        "storage": {"fs": {"create": True, "storageClass": "nfs"}},
    },
    "autoscaling": {
        "secrets": SECRETS,
        "api": {"autoscaling": {"enabled": True}},
        "worker": {"autoscaling": {"enabled": True}},
    },
    "existing-secret": {"existingSecret": "lethe-managed"},
    "two-schedulers": {"secrets": SECRETS, "scheduler": {"replicas": 2}},
    "service-monitor": {"secrets": SECRETS, "metrics": {"serviceMonitor": {"enabled": True}}},
    "alerts-and-dashboard": {
        "secrets": SECRETS,
        "metrics": {"prometheusRule": {"enabled": True}, "grafanaDashboard": {"enabled": True}},
    },
    "tracing": {
        "secrets": SECRETS,
        "tracing": {"endpoint": "http://otel-collector.observability:4318", "env": {"OTEL_BSP_SCHEDULE_DELAY": "500"}},
        "worker": {"extraEnv": [{"name": "EXTRA", "value": "1"}]},
    },
    "ingress-with-tls": {
        "secrets": SECRETS,
        "ingress": {"enabled": True, "host": "files.example.com", "tls": {"secretName": "files-tls"}},
    },
}

# Every variant on S3 names its store: the chart requires the endpoint and names no product for it.
for _variant in VARIANTS.values():
    if _variant.get("config", {}).get("file.storage.driver") != "fs":
        _variant["config"] = {"file.s3.endpoint": ENDPOINT, **_variant.get("config", {})}


def render(values: dict[str, Any], upgrade: bool = False) -> list[dict[str, Any]]:
    """The chart's manifests, as `helm template` makes them: an install, or an upgrade (whose lookups of what is
    installed find nothing here: a release installed before the chart made its keyring and ConfigMap key)."""
    config = values.get("config", {})
    if config.get("file.storage.driver", "s3") == "s3" and "file.s3.endpoint" not in config:
        values = {**values, "config": {**config, "file.s3.endpoint": ENDPOINT}}  # the store, which the chart requires
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values, name="lethe", namespace="files", is_install=not upgrade, is_upgrade=upgrade)
    docs = []
    for path, text in manifests.items():
        if path.endswith("NOTES.txt"):
            continue
        docs += [doc for doc in yaml.safe_load_all(text) if doc]
    return docs


def by_kind(docs, kind):
    return [doc for doc in docs if doc["kind"] == kind]


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def rendered(request):
    return request.param, render(VARIANTS[request.param])


def test_the_chart_lints_clean():
    result = helm.lint(str(CHART), VARIANTS["default"])
    assert result["errors"] == []
    assert [m for m in result["messages"] if m["severity"] > 1] == []


def test_every_manifest_validates_strictly(rendered):
    name, docs = rendered
    assert docs
    for doc in docs:
        if doc["kind"] == "ServiceMonitor":
            check_service_monitor(doc)
            continue
        if doc["kind"] == "PrometheusRule":
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            assert all(rule["expr"] and rule["alert"] for group in doc["spec"]["groups"] for rule in group["rules"])
            continue
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def check_service_monitor(doc):
    """A custom resource: checked on its own (the Prometheus Operator's schema is not bundled)."""
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(doc["spec"]) == {"selector", "endpoints"}
    assert {e["port"] for e in doc["spec"]["endpoints"]} == {"http", "metrics"}
    assert all(e["path"] == "/metrics" for e in doc["spec"]["endpoints"])


def pod_specs(docs):
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job"):
            yield doc["metadata"]["name"], doc["spec"]["template"]["spec"]


def test_every_container_runs_as_non_root_with_a_read_only_root(rendered):
    _, docs = rendered
    specs = list(pod_specs(docs))
    assert len(specs) >= 3
    for name, spec in specs:
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 10001
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["automountServiceAccountToken"] is False
        for container in spec["containers"]:
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True, name
            assert security["allowPrivilegeEscalation"] is False, name
            assert security["capabilities"] == {"drop": ["ALL"]}, name
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            assert "/tmp" in mounts, name


def test_the_api_has_both_probes_and_a_service(rendered):
    _, docs = rendered
    api = next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-api"))
    container = api["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["api"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert any(s["metadata"]["name"].endswith("-api") for s in by_kind(docs, "Service"))


def test_roles_and_their_settings():
    docs = render(VARIANTS["default"])
    deployments = {d["metadata"]["name"]: d for d in by_kind(docs, "Deployment")}
    assert set(deployments) == {"lethe-api", "lethe-worker", "lethe-scheduler"}
    worker = deployments["lethe-worker"]["spec"]["template"]["spec"]["containers"][0]
    assert worker["args"] == [
        "worker",
        "--processes",
        "2",
        "--threads",
        "4",
        "--queues",
        "maintenance",
        "scan",
        "webhooks",
        "variants",
        "stores",
    ]
    assert worker["ports"] == [{"name": "metrics", "containerPort": 9191, "protocol": "TCP"}]
    scheduler = deployments["lethe-scheduler"]["spec"]
    assert scheduler["replicas"] == 1 and scheduler["strategy"] == {"type": "Recreate"}
    job = by_kind(docs, "Job")[0]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate"]
    assert {p["metadata"]["name"] for p in by_kind(docs, "PodDisruptionBudget")} == {"lethe-api", "lethe-worker"}
    for deployment in deployments.values():
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert "checksum/config" in annotations and "checksum/secret" in annotations


def test_a_config_change_rolls_the_pods():
    before = render(VARIANTS["default"])
    after = render({**VARIANTS["default"], "config": {"file.unattached_ttl": "2d"}})

    def checksum(docs):
        return by_kind(docs, "Deployment")[0]["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    assert checksum(before) != checksum(after)


def test_the_configmap_covers_every_configuration_key_that_is_not_a_secret():
    docs = render(VARIANTS["default"])
    data = by_kind(docs, "ConfigMap")[0]["data"]
    expected = {key.env for key in KEYS if not key.secret}
    assert expected <= set(data)
    assert not {key.env for key in KEYS if key.secret} & set(data)
    assert data["LETHE_API_HOST"] == "0.0.0.0" and data["LETHE_FILE_STORAGE_DRIVER"] == "s3"
    # values.yaml and values.schema.json list the same keys as the code.
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    # worker.processes and worker.threads are set once, under worker: (issue 21: under config: they did nothing)
    from_roles = {"worker.processes", "worker.threads"}
    assert set(values["config"]) == {key.name for key in KEYS if not key.secret} - from_roles
    assert data["LETHE_WORKER_PROCESSES"] == str(values["worker"]["processes"])
    assert set(values["secrets"]) == {key.name for key in KEYS if key.secret}
    # ... which the schema still accepts under config: (deprecated: values files written before keep working)
    assert set(schema["properties"]["config"]["properties"]) == set(values["config"]) | from_roles
    assert set(schema["properties"]["secrets"]["properties"]) == set(values["secrets"])


def test_the_secret_holds_the_secret_keys_or_an_existing_secret_is_used():
    docs = render(VARIANTS["default"])
    secret = next(s for s in by_kind(docs, "Secret") if s["metadata"]["name"] == "lethe")
    assert set(secret["stringData"]) == {
        "LETHE_DATABASE_URL",
        "LETHE_BROKER_URL",
        "LETHE_AUTH_JWT_SECRET",
        "LETHE_FILE_S3_ACCESS_KEY",
        "LETHE_FILE_S3_SECRET_KEY",
        "LETHE_FILE_LINK_SECRET",
        "LETHE_FILE_KEYRING",
    }
    # a link secret the chart made: long enough for the api's check, and the one given when there is one
    assert len(secret["stringData"]["LETHE_FILE_LINK_SECRET"]) >= 32
    # a keyring the chart made: one key of 32 random bytes, which the configuration takes; new files are sealed
    from app.platform.keys import parse_keyring

    made = parse_keyring(secret["stringData"]["LETHE_FILE_KEYRING"])
    assert len(made) == 1 and made[0].id.startswith("chart-") and len(made[0].material) == 32
    assert by_kind(docs, "ConfigMap")[0]["data"]["LETHE_FILE_ENCRYPTION"] == "true"
    ring = "2027-01:" + "A" * 43 + "=," + "2026-12:" + "B" * 43 + "="
    given_ring = render({**VARIANTS["default"], "secrets": {**SECRETS, "file.keyring": ring}})
    assert (
        next(s for s in by_kind(given_ring, "Secret") if s["metadata"]["name"] == "lethe")["stringData"][
            "LETHE_FILE_KEYRING"
        ]
        == ring
    )
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"  # uninstall keeps the keyring
    given = render({**VARIANTS["default"], "secrets": {**SECRETS, "file.link_secret": "g" * 40}})
    kept = next(s for s in by_kind(given, "Secret") if s["metadata"]["name"] == "lethe")
    assert kept["stringData"]["LETHE_FILE_LINK_SECRET"] == "g" * 40
    docs = render(VARIANTS["existing-secret"])
    assert by_kind(docs, "Secret") == []
    for _, spec in pod_specs(docs):
        refs = [e["secretRef"]["name"] for e in spec["containers"][0]["envFrom"] if "secretRef" in e]
        assert refs == ["lethe-managed"]


def test_files_are_sealed_on_a_new_installation_and_an_upgrade_keeps_what_was_installed():
    def sealing(docs) -> tuple[str, bool]:
        secret = next(s for s in by_kind(docs, "Secret") if s["metadata"]["name"] == "lethe")
        return by_kind(docs, "ConfigMap")[0]["data"]["LETHE_FILE_ENCRYPTION"], "LETHE_FILE_KEYRING" in secret[
            "stringData"
        ]

    assert sealing(render(VARIANTS["default"])) == ("true", True)
    # an upgrade of a release installed before the chart sealed files: as it was, and no key is made for it
    assert sealing(render(VARIANTS["default"], upgrade=True)) == ("false", False)
    # the operator's word wins either way; a keyring is made only where files are to be sealed
    turned_on = copy.deepcopy(VARIANTS["default"])
    turned_on.setdefault("config", {})["file.encryption"] = True
    assert sealing(render(turned_on, upgrade=True)) == ("true", True)
    turned_off = copy.deepcopy(VARIANTS["default"])
    turned_off.setdefault("config", {})["file.encryption"] = False
    assert sealing(render(turned_off)) == ("false", False)


def test_fs_needs_a_read_write_many_claim():
    docs = render(VARIANTS["fs-with-claim"])
    for name, spec in pod_specs(docs):
        if name.endswith("-migrate"):
            continue
        claims = [v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v]
        assert claims == ["lethe-objects"], name
    assert by_kind(docs, "ConfigMap")[0]["data"]["LETHE_FILE_FS_ROOT"] == "/var/lib/lethe/objects"
    created = by_kind(render(VARIANTS["fs-created-claim"]), "PersistentVolumeClaim")
    assert created[0]["spec"]["accessModes"] == ["ReadWriteMany"]
    with pytest.raises(helm.HelmError) as info:
        render({"secrets": SECRETS, "config": {"file.storage.driver": "fs"}})
    assert "ReadWriteMany" in str(info.value)


def test_autoscaling_replaces_fixed_replicas():
    docs = render(VARIANTS["autoscaling"])
    assert {h["spec"]["scaleTargetRef"]["name"] for h in by_kind(docs, "HorizontalPodAutoscaler")} == {
        "lethe-api",
        "lethe-worker",
    }
    for deployment in by_kind(docs, "Deployment"):
        if not deployment["metadata"]["name"].endswith("-scheduler"):
            assert "replicas" not in deployment["spec"]


def test_standard_labels(rendered):
    _, docs = rendered
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "lethe" and labels["app.kubernetes.io/instance"] == "lethe"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"


@pytest.mark.parametrize(
    "values",
    [
        {"api": {"replicas": "two"}},
        {"config": {"file.gc_batch_size": "many"}},
        {"config": {"file.unattached_tll": "1d"}},
        {"worker": {"queues": ["everything"]}},
        {"image": {"pullPolicy": "Sometimes"}},
        # typos outside config and secrets, at every level
        {"api": {"replica": 2}},
        {"worker": {"proceses": 2}},
        {"ingres": {"enabled": True}},
        {"metrics": {"serviceMonitor": {"enable": True}}},
        {"storage": {"fs": {"existingclaim": "x"}}},
        # an Ingress needs its host; sizes and durations have their form
        {"ingress": {"enabled": True}},
        {"config": {"file.max_size": "1 gig"}},
        {"config": {"image.max_pixels": "90 MP"}},
        {"config": {"file.gc_interval": "soon"}},
    ],
)
def test_values_schema_rejects_wrong_values(values):
    merged = copy.deepcopy(VARIANTS["default"])
    merged.update({**values, "config": {**merged["config"], **values.get("config", {})}})
    with helm.Chart.load(str(CHART)) as chart:
        with pytest.raises(helm.HelmError):
            chart.validate_schema(merged)
        chart.validate_schema(VARIANTS["default"])


def test_the_dockerfile_lints_clean():
    hadolint = shutil.which("hadolint") or str(Path(__import__("sys").executable).parent / "hadolint")
    result = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_runs_as_a_fixed_non_root_user_with_lethe_as_entry_point():
    text = (ROOT / "Dockerfile").read_text()
    assert "USER 10001:10001" in text and 'ENTRYPOINT ["lethe"]' in text
    assert text.count("FROM ") == 2  # build, then a slim runtime without compilers
    assert "PYTHONDONTWRITEBYTECODE=1" in text and "PYTHONUNBUFFERED=1" in text and "PROMETHEUS_MULTIPROC_DIR" in text


def test_every_values_block_of_the_deploy_doc_installs_and_loads():
    """Issue 21, point 12: the doc's values (a minimal first install; a retention policy and an unmanaged prefix
    as YAML block scalars) render, and the configuration they give the pods is one Lethe loads."""
    import re

    from app.platform import config

    doc = (ROOT / "docs" / "deploy.md").read_text()
    blocks = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", doc, re.S)]
    assert len(blocks) >= 2 and any("retention.policies" in block.get("config", {}) for block in blocks)
    secrets = blocks[0]["secrets"]
    policies, prefixes = [], []
    for block in blocks:
        docs = render(
            {**block, "secrets": {**secrets, **block.get("secrets", {})}}
        )  # layered on the first file, as -f files are
        env = dict(by_kind(docs, "ConfigMap")[0]["data"])
        env.update(next(s for s in by_kind(docs, "Secret") if s["metadata"]["name"] == "lethe")["stringData"])
        loaded = config.load(env)  # raises ConfigError naming any key the doc got wrong
        deployment = next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-worker"))
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--processes") + 1] == str(loaded.worker.processes)
        policies += [policy.name for policy in loaded.retention.policies]
        prefixes += [prefix.prefix for prefix in loaded.storage.unmanaged_prefixes]
    assert "exports" in policies and "issues/" in prefixes


def test_the_worker_size_is_set_once_and_an_old_values_file_still_works():
    docs = render({"secrets": SECRETS, "worker": {"processes": 3, "threads": 5}})
    worker = next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-worker"))
    args = worker["spec"]["template"]["spec"]["containers"][0]["args"]
    data = by_kind(docs, "ConfigMap")[0]["data"]
    assert args[args.index("--processes") + 1] == "3" and args[args.index("--threads") + 1] == "5"
    assert (data["LETHE_WORKER_PROCESSES"], data["LETHE_WORKER_THREADS"]) == ("3", "5")
    # A values file written before (the keys under config:) installs, and its numbers are the ones used
    docs = render({"secrets": SECRETS, "config": {"worker.processes": 1, "worker.threads": 2}})
    worker = next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-worker"))
    args = worker["spec"]["template"]["spec"]["containers"][0]["args"]
    assert (
        args[args.index("--processes") + 1] == "1"
        and by_kind(docs, "ConfigMap")[0]["data"]["LETHE_WORKER_PROCESSES"] == "1"
    )


@pytest.mark.parametrize("secrets", [{}, {"database.url": ""}, {"broker.url": ""}])
def test_a_chart_without_its_database_or_broker_is_refused_at_render_time_naming_the_key(secrets):
    values = {"secrets": {**SECRETS, **secrets}} if secrets else {}
    values["config"] = {"file.s3.endpoint": ENDPOINT}
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmError) as refused:
        chart.render(values, name="lethe", namespace="files", is_install=True)
    named = "database.url" if secrets != {"broker.url": ""} else "broker.url"
    assert named in str(refused.value)
    render({"existingSecret": "lethe-managed"})  # a Secret managed elsewhere holds them: no refusal


def test_a_chart_on_s3_without_its_endpoint_is_refused_at_render_time_naming_the_key():
    # The chart's default names no product (a default of minio:9000 sent installations to a store that may not be
    # there): the operator names the store, as they name the database.
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["config"]["file.s3.endpoint"] == "" and "minio:" not in (CHART / "values.yaml").read_text()
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmError) as refused:
        chart.render({"secrets": SECRETS}, name="lethe", namespace="files", is_install=True)
    assert "file.s3.endpoint" in str(refused.value)
    render({"secrets": SECRETS, "config": {"file.storage.driver": "fs"}, "storage": {"fs": {"create": True}}})


def test_the_ingress_lets_parts_through_and_terminates_tls():
    (ingress,) = by_kind(render(VARIANTS["ingress-with-tls"]), "Ingress")
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/proxy-body-size"] == "16m"  # over 8 MiB parts, ingress-nginx's 1m
    assert annotations["nginx.ingress.kubernetes.io/proxy-request-buffering"] == "off"
    assert ingress["spec"]["tls"] == [{"hosts": ["files.example.com"], "secretName": "files-tls"}]
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "lethe-api", "port": {"name": "http"}}
    assert by_kind(render(VARIANTS["default"]), "Ingress") == []


def test_the_ci_values_lint_clean_as_chart_testing_lints_a_chart():
    """`helm lint` of the bare chart refuses by design (the database and broker URLs are required); chart-testing
    lints each ci/*-values.yaml instead, as charts are usually checked."""
    files = sorted((CHART / "ci").glob("*-values.yaml"))
    assert files
    for path in files:
        result = helm.lint(str(CHART), yaml.safe_load(path.read_text()))
        assert result["errors"] == [], (path.name, result)
        assert [m for m in result["messages"] if m["severity"] > 1] == [], (path.name, result)


def test_every_size_and_duration_of_the_defaults_passes_the_schema():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    with helm.Chart.load(str(CHART)) as chart:
        chart.validate_schema({**VARIANTS["default"], "config": {**values["config"], "file.s3.endpoint": ENDPOINT}})


def test_tracing_passes_the_standard_variables_to_every_role_and_nothing_when_off():
    traced = render(VARIANTS["tracing"])
    for deployment in by_kind(traced, "Deployment"):
        env = {e["name"]: e["value"] for e in deployment["spec"]["template"]["spec"]["containers"][0].get("env", [])}
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.observability:4318"
        assert env["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio" and env["OTEL_TRACES_SAMPLER_ARG"] == "0.1"
        assert env["OTEL_BSP_SCHEDULE_DELAY"] == "500"
        assert ("EXTRA" in env) == deployment["metadata"]["name"].endswith("worker")
    for deployment in by_kind(render(VARIANTS["default"]), "Deployment"):
        names = [e["name"] for e in deployment["spec"]["template"]["spec"]["containers"][0].get("env", [])]
        assert not [name for name in names if name.startswith("OTEL_")]
    with pytest.raises(Exception, match="PATH. does not match"):
        render({**VARIANTS["default"], "tracing": {"env": {"PATH": "/tmp"}}})
