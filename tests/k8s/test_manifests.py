"""KubeRay manifests: rendered from the configs, overlays build, invariants hold."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from jobs import k8s  # noqa: E402

OVERLAYS = sorted(k8s.OVERLAYS)
README = (REPO / "k8s" / "README.md").read_text()


def _docs(overlay: str) -> list[dict]:
    return k8s.build(REPO / "k8s" / "overlays" / overlay)


def _by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def _cluster_specs(docs: list[dict]) -> list[dict]:
    out = [d["spec"] for d in _by_kind(docs, "RayCluster")]
    out += [d["spec"]["rayClusterSpec"] for d in _by_kind(docs, "RayJob")]
    out += [d["spec"]["rayClusterConfig"] for d in _by_kind(docs, "RayService")]
    return out


def test_committed_manifests_are_the_render_output(tmp_path):
    assert k8s.stale_files() == [], "run: python jobs/k8s.py render"
    # and the check really compares: a hand edit is caught
    out = tmp_path / "overlays"
    for path, text in k8s.render_all(out).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    victim = out / "dev" / "generated" / "rayjob.yaml"
    victim.write_text(victim.read_text().replace("shutdownAfterJobFinishes: true", "shutdownAfterJobFinishes: false"))
    assert k8s.stale_files(out) == [str(victim)]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_manifest_parses_and_has_identity(overlay):
    files = sorted((REPO / "k8s").rglob("*.yaml"))
    assert files
    for f in files:
        for d in yaml.safe_load_all(f.read_text()):
            if d is None or f.name == "kustomization.yaml":
                continue
            assert d.get("apiVersion") and d.get("kind") and d.get("metadata", {}).get("name"), f
    docs = _docs(overlay)
    kinds = {d["kind"] for d in docs}
    assert {"RayCluster", "RayJob", "Deployment", "StatefulSet", "NetworkPolicy", "RuntimeClass"} <= kinds
    for d in docs:
        if d["kind"] not in ("Namespace", "RuntimeClass"):
            assert d["metadata"]["namespace"] == "opteval", d["metadata"]["name"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed; the Python build is checked alone")
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_python_build_matches_kubectl_kustomize(overlay):
    out = subprocess.run(["kubectl", "kustomize", str(REPO / "k8s" / "overlays" / overlay)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    theirs = sorted(yaml.safe_load_all(out.stdout), key=key)
    assert theirs == sorted(_docs(overlay), key=key)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kuberay_v1_required_fields_and_invariants(overlay):
    docs = _docs(overlay)
    specs = _cluster_specs(docs)
    assert len(specs) >= 2
    for spec in specs:
        assert spec["rayVersion"] == k8s.RAY_VERSION
        head = spec["headGroupSpec"]
        assert head["rayStartParams"]["num-cpus"] == "0"  # the head runs no tasks
        hc = head["template"]["spec"]["containers"]
        assert hc and all(c["name"] and c["image"] for c in hc)
        assert not any("nvidia.com/gpu" in str(c.get("resources")) for c in hc)
        groups = {g["groupName"]: g for g in spec["workerGroupSpecs"]}
        assert "cpu-workers" in groups
        for name, g in groups.items():
            assert g["minReplicas"] <= g["replicas"] <= g["maxReplicas"], name
            assert isinstance(g["rayStartParams"], dict)
            cs = g["template"]["spec"]["containers"]
            gpu = [c["resources"]["limits"].get("nvidia.com/gpu") for c in cs]
            if name == "gpu-workers":
                assert all(x and int(x) > 0 for x in gpu)
            else:  # GPU requests on the GPU group only
                assert not any(gpu) and not any("nvidia.com/gpu" in c["resources"].get("requests", {}) for c in cs)
            assert g["template"]["metadata"]["labels"]["opteval.io/role"] == (
                k8s.EXECUTOR_ROLE if name == "cpu-workers" else "llm")
            for c in cs:  # resource limits on every Ray container
                assert c["resources"]["limits"]["cpu"] and c["resources"]["limits"]["memory"]
        # the ledger lives on the shared RWX volume in every pod
        for tmpl in [head["template"]] + [g["template"] for g in groups.values()]:
            vols = {v["name"]: v for v in tmpl["spec"]["volumes"]}
            assert vols["shared"]["persistentVolumeClaim"]["claimName"] == k8s.SHARED_PVC
            mounts = tmpl["spec"]["containers"][0]["volumeMounts"]
            assert {"name": "shared", "mountPath": k8s.SHARED_MOUNT} in mounts
            env = {e["name"]: e.get("value") for e in tmpl["spec"]["containers"][0]["env"]}
            assert env["MLFLOW_TRACKING_URI"] == k8s.MLFLOW_URI
    pvc = next(d for d in docs if d["kind"] == "PersistentVolumeClaim" and d["metadata"]["name"] == k8s.SHARED_PVC)
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    if overlay == "dev":
        assert all("gpu-workers" not in {g["groupName"] for g in s["workerGroupSpecs"]} for s in specs)
        assert pvc["spec"]["resources"]["requests"]["storage"] == "10Gi"  # the overlay's patch applied
    else:
        assert all("gpu-workers" in {g["groupName"] for g in s["workerGroupSpecs"]} for s in specs)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rayjob_entrypoint_runtime_env_and_readme(overlay):
    job = _by_kind(_docs(overlay), "RayJob")[0]["spec"]
    ep = job["entrypoint"]
    assert ep.startswith("python jobs/sweep.py ") and ep == k8s.entrypoint(k8s.OVERLAYS[overlay])
    assert f"sweep.output_dir={k8s.RESULTS_DIR}" in ep and k8s.RESULTS_DIR.startswith(k8s.SHARED_MOUNT)
    assert ep in README, "k8s/README.md must show the exact entrypoint"
    assert job["shutdownAfterJobFinishes"] is True and job["backoffLimit"] >= 1
    env = yaml.safe_load(job["runtimeEnvYAML"])
    assert env["env_vars"]["MLFLOW_TRACKING_URI"] == k8s.MLFLOW_URI
    # the sweep's own loader accepts the entrypoint's arguments and puts the ledger on shared storage
    cfg = k8s.load_sweep(k8s.OVERLAYS[overlay])
    assert str(cfg.sweep.output_dir) == k8s.RESULTS_DIR


def test_mlflow_uri_points_at_the_in_cluster_service():
    docs = _docs("paper")
    svc = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "mlflow")
    port = svc["spec"]["ports"][0]["port"]
    assert k8s.MLFLOW_URI == f"http://{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc.cluster.local:{port}"
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "mlflow")
    assert svc["spec"]["selector"] == dep["spec"]["template"]["metadata"]["labels"]
    args = " ".join(dep["spec"]["template"]["spec"]["containers"][0]["args"])
    assert "postgresql://" in args and "@mlflow-postgres:5432/" in args
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]


def test_executor_egress_is_denied():
    docs = _docs("paper")
    np_ = next(d for d in docs if d["kind"] == "NetworkPolicy")
    assert np_["spec"]["podSelector"]["matchLabels"] == {"opteval.io/role": k8s.EXECUTOR_ROLE}
    assert np_["spec"]["policyTypes"] == ["Egress"]
    for rule in np_["spec"]["egress"]:  # only Ray pods and DNS; no ipBlock, no open rule
        assert rule.get("to") and not any("ipBlock" in t for t in rule["to"])
    rc = next(d for d in docs if d["kind"] == "RuntimeClass")
    assert rc["handler"] == "runsc"
    cpu = [g for s in _cluster_specs(docs) for g in s["workerGroupSpecs"] if g["groupName"] == "cpu-workers"]
    assert all(g["template"]["spec"]["runtimeClassName"] == rc["metadata"]["name"] for g in cpu)


def test_rayservice_builds_the_same_application_as_local_code():
    from cluster import llm_serving
    from cluster.config import as_plain, load_config, model_config
    from ray.serve.schema import ServeDeploySchema

    svc = _by_kind(_docs("paper"), "RayService")[0]
    served = yaml.safe_load(svc["spec"]["serveConfigV2"])
    ServeDeploySchema(**served)  # Serve's schema of a config file accepts it
    app = served["applications"][0]
    assert app["import_path"] == "ray.serve.llm:build_openai_app"
    ov = k8s.OVERLAYS["paper"]
    local_cfg = load_config(list(ov.sweep_args))  # the sweep config a local run would use
    local = llm_serving.serve_app_config([as_plain(model_config(n)) for n in ov.service_models], local_cfg)
    assert app == local
    ids = [c["model_loading_config"]["model_id"] for c in app["args"]["llm_configs"]]
    assert ids == list(ov.service_models)
    for c in app["args"]["llm_configs"]:
        llm_serving.llm_config({"name": c["model_loading_config"]["model_id"], "backend": "vllm",
                                "vllm": {"source": c["model_loading_config"]["model_source"],
                                         "engine_kwargs": c["engine_kwargs"],
                                         "deployment": c["deployment_config"],
                                         "accelerator_type": c.get("accelerator_type")}})


def test_minimal_kustomize_refuses_what_it_cannot_do(tmp_path):
    (tmp_path / "kustomization.yaml").write_text("resources: []\nconfigMapGenerator: []\n")
    with pytest.raises(k8s.KustomizeError, match="configMapGenerator"):
        k8s.build(tmp_path)
