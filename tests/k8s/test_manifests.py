"""KubeRay manifests: rendered from the configs, overlays build, invariants hold on every one."""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from opteval.jobs import k8s
from tests.k8s import crd_schema

REPO = Path(__file__).resolve().parents[2]

OVERLAYS = sorted(k8s.OVERLAYS)
COMPONENTS = ("gvisor", "user-namespaces")
README = (REPO / "k8s" / "README.md").read_text()
RAY_KINDS = ("RayCluster", "RayJob", "RayService")
needs_crds = pytest.mark.skipif(not crd_schema.CRD_DIR.is_dir(), reason=(
    f"KubeRay CRDs not found at {crd_schema.CRD_DIR}: put ray-operator/config/crd/bases/ray.io_*.yaml "
    "from github.com/ray-project/kuberay there"))
needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None,
                                   reason="kubectl not installed; the Python build is checked alone")


@functools.cache
def _built(overlay: str) -> str:
    return json.dumps(k8s.build(REPO / "k8s" / "overlays" / overlay))


def _docs(overlay: str) -> list[dict]:
    return json.loads(_built(overlay))  # a fresh copy each time: tests may edit it


def _by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def _cluster_spec(d: dict) -> dict:
    return {"RayCluster": lambda s: s, "RayJob": lambda s: s["rayClusterSpec"],
            "RayService": lambda s: s["rayClusterConfig"]}[d["kind"]](d["spec"])


def _ray(docs: list[dict]) -> list[dict]:
    return [d for d in docs if d["kind"] in RAY_KINDS]


def _executor_units(params: dict) -> int:
    """The opteval_executor units a group's rayStartParams offer (KubeRay's quoted JSON form)."""
    raw = params.get("resources")
    if raw is None:
        return 0
    assert raw.startswith('"') and raw.endswith('"'), raw  # '"{\"opteval_executor\": N}"'
    return int(json.loads(raw[1:-1].replace('\\"', '"')).get(k8s.EXECUTOR_RESOURCE, 0))


def _gib(q: str) -> float:
    m = re.fullmatch(r"(\d+)(Gi|Mi)?", q)
    assert m, q
    return int(m.group(1)) / (1024 if m.group(2) == "Mi" else 1)


def _all_pod_specs(docs: list[dict]) -> list[tuple[str, dict, bool]]:
    """(where, pod spec, runs untrusted code) for every pod the overlay creates."""
    out = []
    for d in docs:
        name = f"{d['kind']}/{d['metadata']['name']}"
        if d["kind"] in RAY_KINDS:
            spec = _cluster_spec(d)
            out.append((f"{name} head", spec["headGroupSpec"]["template"]["spec"], False))
            for g in spec["workerGroupSpecs"]:
                out.append((f"{name} {g['groupName']}", g["template"]["spec"],
                            _executor_units(g["rayStartParams"]) > 0))
            if d["kind"] == "RayJob":
                out.append((f"{name} submitter", d["spec"]["submitterPodTemplate"]["spec"], False))
        elif d["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
            out.append((name, d["spec"]["template"]["spec"], False))
    return out


# -- render and build ---------------------------------------------------------------------


def test_committed_manifests_are_the_render_output(tmp_path):
    assert k8s.stale_files() == [], "run: python jobs/k8s.py render"
    out = tmp_path / "overlays"  # and the check really compares: a hand edit is caught
    for path, text in k8s.render_all(out).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    victim = out / "dev" / "generated" / "rayjob.yaml"
    victim.write_text(victim.read_text().replace("shutdownAfterJobFinishes: true", "shutdownAfterJobFinishes: false"))
    leftover = out / "paper" / "generated" / "raycluster.yaml"
    leftover.write_text("kind: RayCluster\n")
    assert k8s.stale_files(out) == [str(victim), str(leftover)]


def test_render_check_cli_and_build_errors(tmp_path, capsys):
    assert k8s.main(["render", "--check"]) == 0
    assert k8s.main(["build", str(tmp_path)]) == 2
    assert "no kustomization.yaml" in capsys.readouterr().err


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_manifest_parses_and_has_identity(overlay):
    for f in sorted((REPO / "k8s").rglob("*.yaml")):
        for d in yaml.safe_load_all(f.read_text()):
            if d is None or f.name == "kustomization.yaml" or isinstance(d, list):  # lists: JSON 6902 patches
                continue
            assert d.get("apiVersion") and d.get("kind") and d.get("metadata", {}).get("name"), f
    docs = _docs(overlay)
    for d in docs:
        if d["kind"] not in ("Namespace", "RuntimeClass"):
            assert d["metadata"]["namespace"] == "opteval", d["metadata"]["name"]


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_python_build_matches_kubectl_kustomize(overlay):
    _same_as_kubectl(REPO / "k8s" / "overlays" / overlay)


def _same_as_kubectl(path: Path) -> list[dict]:
    out = subprocess.run(["kubectl", "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    theirs = sorted(yaml.safe_load_all(out.stdout), key=key)
    ours = sorted(k8s.build(path), key=key)
    assert theirs == ours
    return ours


def _with_components(tmp_path: Path, overlay: str, comps: tuple[str, ...]) -> Path:
    """A user's overlay: one of ours plus components (paths relative, as kustomize wants)."""
    d = tmp_path / f"{overlay}-{'-'.join(comps)}"
    d.mkdir()
    rel = lambda p: os.path.relpath(p, d)  # noqa: E731
    (d / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [rel(REPO / "k8s" / "overlays" / overlay)],
        "components": [rel(REPO / "k8s" / "components" / c) for c in comps]}))
    return d


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_components_touch_only_the_executor_group(overlay, tmp_path):
    d = _with_components(tmp_path, overlay, COMPONENTS)
    docs = _same_as_kubectl(d) if shutil.which("kubectl") else k8s.build(d)
    rc = _by_kind(docs, "RuntimeClass")
    assert [r["metadata"]["name"] for r in rc] == ["opteval-gvisor"] and rc[0]["handler"] == "runsc"
    assert rc[0]["scheduling"]["nodeSelector"]  # its own node selection
    for where, pod, untrusted in _all_pod_specs(docs):
        assert (pod.get("runtimeClassName") == "opteval-gvisor") == untrusted, where
        assert (pod.get("hostUsers") is False) == untrusted, where
    if crd_schema.CRD_DIR.is_dir():
        for obj in _ray(docs):
            assert not crd_schema.errors(obj)


def test_component_patch_refuses_a_group_that_is_not_cpu_workers():
    doc = k8s.rayjob(k8s.OVERLAYS["dev"])
    doc["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["groupName"] = "gpu-workers"
    ops = yaml.safe_load((REPO / "k8s" / "components" / "gvisor" / "rayjob.yaml").read_text())
    with pytest.raises(k8s.KustomizeError, match="test .*cpu-workers"):
        k8s._json6902(doc, ops, "gvisor")


def test_minimal_kustomize_refuses_what_it_cannot_do(tmp_path):
    (tmp_path / "kustomization.yaml").write_text("resources: []\nconfigMapGenerator: []\n")
    with pytest.raises(k8s.KustomizeError, match="configMapGenerator"):
        k8s.build(tmp_path)


# -- KubeRay's CRDs, strictly --------------------------------------------------------------


@needs_crds
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ray_objects_validate_strictly_against_kuberay_crds(overlay):
    ray = _ray(_docs(overlay))
    assert len(ray) == 1  # one Ray object per apply
    for d in ray:
        assert crd_schema.errors(d) == [], d["kind"]


@needs_crds
def test_strict_validation_rejects_unknown_and_misplaced_fields():
    job = k8s.rayjob(k8s.OVERLAYS["paper"])
    assert crd_schema.errors(job) == []
    bad = yaml.safe_load(yaml.safe_dump(job))
    bad["spec"]["rayClusterSpec"]["workerGroupSpecs"][1]["template"]["spec"]["nodeselector"] = {"a": "b"}
    bad["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParam"] = {}
    bad["spec"]["activeDeadlineSeconds"] = "1h"
    errs = "\n".join(crd_schema.errors(bad))
    assert "'nodeselector' was unexpected" in errs and "'rayStartParam' was unexpected" in errs
    assert "activeDeadlineSeconds: '1h' is not of type 'integer'" in errs


# -- the invariants --------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_at_most_one_gpu_ray_cluster_and_gpu_groups_select_gpu_nodes(overlay):
    ov = k8s.OVERLAYS[overlay]
    docs = _docs(overlay)
    gpu_clusters = 0
    for d in _ray(docs):
        spec = _cluster_spec(d)
        gpu_groups = [g for g in spec["workerGroupSpecs"]
                      if any("nvidia.com/gpu" in c["resources"].get("limits", {}) for c in g["template"]["spec"]["containers"])]
        assert len(gpu_groups) <= 1
        gpu_clusters += bool(gpu_groups)
        for g in gpu_groups:
            pod = g["template"]["spec"]
            terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            assert terms and all(t["matchExpressions"] for t in terms)
            assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
            c = pod["containers"][0]
            gpus = int(c["resources"]["limits"]["nvidia.com/gpu"])
            assert float(c["resources"]["requests"]["cpu"]) >= gpus * k8s.CPU_PER_GPU  # CPU reserved per GPU
            assert _executor_units(g["rayStartParams"]) == 0  # executors never land on GPU pods
            assert c["image"] == k8s.GPU_IMAGE
            assert g["maxReplicas"] * gpus <= 8  # one 8-GPU node at most
        for g in spec["workerGroupSpecs"]:
            if g not in gpu_groups:
                assert not any("nvidia.com/gpu" in str(c["resources"]) for c in g["template"]["spec"]["containers"])
    assert gpu_clusters == (0 if overlay == "dev" else 1)
    assert (ov.gpu_workers is None) == (overlay == "dev")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_head_runs_no_tasks_and_cpu_workers_offer_executor_slots(overlay):
    for d in _ray(_docs(overlay)):
        spec = _cluster_spec(d)
        assert spec["rayVersion"] == k8s.RAY_VERSION
        assert spec["authOptions"] == {"mode": "token"}  # Ray token authentication
        head = spec["headGroupSpec"]
        assert head["rayStartParams"]["num-cpus"] == "0"
        assert _executor_units(head["rayStartParams"]) == 0
        hc = head["template"]["spec"]["containers"]
        assert [c["image"] for c in hc] == [k8s.CPU_IMAGE]
        assert not any("nvidia.com/gpu" in str(c["resources"]) for c in hc)
        assert _gib(hc[0]["resources"]["limits"]["memory"]) >= 6  # driver + model traffic
        for g in spec["workerGroupSpecs"]:
            assert g["minReplicas"] <= g["replicas"] <= g["maxReplicas"], g["groupName"]
            if g["groupName"] == "cpu-workers":
                c = g["template"]["spec"]["containers"][0]
                cpus = int(c["resources"]["limits"]["cpu"])
                assert _executor_units(g["rayStartParams"]) == cpus - 1 >= 1
                assert c["image"] == k8s.CPU_IMAGE
                assert g["template"]["metadata"]["labels"]["opteval.io/role"] == k8s.EXECUTOR_ROLE
        # the literal KubeRay form of the pinned resource name
    assert k8s.executor_resources(15) == '"{\\"opteval_executor\\": 15}"'


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_size_shm_and_request_ephemeral_storage(overlay):
    for d in _ray(_docs(overlay)):
        spec = _cluster_spec(d)
        for g in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
            pod = g["template"]["spec"]
            c = pod["containers"][0]
            lim = c["resources"]["limits"]
            assert c["resources"]["requests"]["ephemeral-storage"] and lim["cpu"] and lim["memory"]
            shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
            assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
            shm_gi = _gib(shm["emptyDir"]["sizeLimit"])
            store_gi = int(g["rayStartParams"]["object-store-memory"]) / 2**30
            assert store_gi < shm_gi <= _gib(lim["memory"]) / 2  # the store fits in shm, shm in the pod


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_untrusted_pods_hold_no_token_credential_or_privilege(overlay):
    docs = _docs(overlay)
    pods = _all_pod_specs(docs)
    assert any(u for _, _, u in pods) == (overlay != "serve")
    secretish = re.compile(r"TOKEN|SECRET|PASSWORD|KEY|CREDENTIAL|AWS_|HF_|HUGGING", re.I)
    for where, pod, untrusted in pods:
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            assert not (c.get("securityContext") or {}).get("privileged"), where  # nobody is privileged
        if not untrusted:
            continue
        assert pod["automountServiceAccountToken"] is False, where
        assert pod["securityContext"]["seccompProfile"] == {"type": "Localhost", "localhostProfile": k8s.SECCOMP_PROFILE}
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert "hostNetwork" not in pod and "hostPID" not in pod and "hostIPC" not in pod
        for v in pod["volumes"]:  # scratch only: no claim, secret, host path or projected token
            assert set(v) == {"name", "emptyDir"}, (where, v)
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}, where
            assert "envFrom" not in c, where
            for e in c.get("env", []):
                assert "valueFrom" not in e and not secretish.search(e["name"]), (where, e)
            assert all(m["name"] == "dshm" for m in c["volumeMounts"]), where


def test_no_committed_secret_and_no_literal_password():
    for f in sorted((REPO / "k8s").rglob("*.yaml")):
        for d in yaml.safe_load_all(f.read_text()):
            if isinstance(d, dict):
                assert d.get("kind") != "Secret", f"{f} commits a Secret"
        assert "change-me" not in f.read_text(), f
    for overlay in OVERLAYS:
        assert not _by_kind(_docs(overlay), "Secret")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_claims_bind_everywhere_and_reach_no_ray_pod_read_write(overlay):
    docs = _docs(overlay)
    claims = [d["spec"] for d in _by_kind(docs, "PersistentVolumeClaim")]
    claims += [t["spec"] for d in _by_kind(docs, "StatefulSet") for t in d["spec"].get("volumeClaimTemplates", [])]
    assert claims
    for c in claims:  # the default class of GKE, EKS, AKS and kind provides ReadWriteOnce only
        assert "ReadWriteMany" not in c["accessModes"] or c.get("storageClassName"), c
    for d in _ray(docs):  # no Ray pod mounts a claim: the ledger lives in the object store
        assert "persistentVolumeClaim" not in json.dumps(_cluster_spec(d))


@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if k8s.OVERLAYS[o].kind == "RayJob"])
def test_rayjob_entrypoint_deadline_submitter_and_ledger(overlay):
    ov = k8s.OVERLAYS[overlay]
    job = _by_kind(_docs(overlay), "RayJob")[0]["spec"]
    ep = job["entrypoint"]
    assert ep.startswith("python jobs/sweep.py ") and ep == k8s.entrypoint(ov)
    assert ep in README, "k8s/README.md must show the exact entrypoint"
    assert job["activeDeadlineSeconds"] > 0 and job["backoffLimit"] >= 1 and job["shutdownAfterJobFinishes"]
    assert job["submissionMode"] == "K8sJobMode" and job["entrypointNumCpus"] == 0
    assert job["submitterPodTemplate"]["spec"]["automountServiceAccountToken"] is False
    env = yaml.safe_load(job["runtimeEnvYAML"])
    assert env["working_dir"] == "local:///app"
    assert env["env_vars"]["MLFLOW_TRACKING_URI"] == k8s.MLFLOW_URI
    cfg = k8s.load_sweep(ov)  # the sweep's own loader accepts the arguments
    assert str(cfg.sweep.output_dir).startswith("s3://") and str(cfg.data.dir) == k8s.DATA_DIR
    head_env = {e["name"]: e for e in job["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]}
    ref = head_env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == k8s.S3_SECRET and not ref.get("optional")
    if overlay == "dev":  # the in-cluster MinIO, created by the overlay
        assert head_env["AWS_ENDPOINT_URL"]["value"] == k8s.MINIO_URL
        svc = _by_kind(_docs(overlay), "Service")
        assert any(f"http://{s['metadata']['name']}.opteval.svc.cluster.local:{s['spec']['ports'][0]['port']}"
                   == k8s.MINIO_URL for s in svc)


def test_ledger_uri_of_dev_writes_to_an_s3_store(tmp_path):
    """The dev overlay's ledger URI (bucket created on first write) against a real S3 server."""
    moto_server = pytest.importorskip("moto.server")
    import pyarrow.fs as pafs

    from opteval.sweepcore.ledger import join_uri, open_filesystem

    server = moto_server.ThreadedMotoServer(port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_ENDPOINT_URL": f"http://{host}:{port}",
               "AWS_REGION": "us-east-1"}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            ledger = k8s.OVERLAYS["dev"].ledger
            assert ledger is not None  # the dev overlay keeps its ledger in the in-cluster MinIO
            fs, path = open_filesystem(join_uri(ledger, "k8s-dev"))
            fs.create_dir(path)
            with fs.open_output_stream(f"{path}/probe") as f:
                f.write(b"ok")
            assert fs.get_file_info(f"{path}/probe").type == pafs.FileType.File
        finally:
            for k, v in old.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    finally:
        server.stop()


def test_executor_egress_policy():
    docs = _docs("paper")
    np_ = next(d for d in docs if d["kind"] == "NetworkPolicy")
    assert np_["spec"]["podSelector"]["matchLabels"] == {"opteval.io/role": k8s.EXECUTOR_ROLE}
    assert np_["spec"]["policyTypes"] == ["Egress"]
    for rule in np_["spec"]["egress"]:  # Ray pods and DNS only; no ipBlock, no open rule
        assert rule.get("to") and not any("ipBlock" in t for t in rule["to"])
    head_rule = next(r for r in np_["spec"]["egress"]
                     if r["to"][0].get("podSelector", {}).get("matchLabels") == {"ray.io/node-type": "head"})
    open_ports = [(p["port"], p.get("endPort", p["port"])) for p in head_rule["ports"]]
    for port in (6379, 8000):
        assert any(a <= port <= b for a, b in open_ports)
    for port in (8265, 10001):  # job API / dashboard, Ray client
        assert not any(a <= port <= b for a, b in open_ports)


def test_seccomp_profile_allows_namespaces_and_denies_the_rest():
    cm = next(d for d in _docs("dev") if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "opteval-seccomp")
    prof = json.loads(cm["data"][Path(k8s.SECCOMP_PROFILE).name])
    denied = {n for rule in prof["syscalls"] if rule["action"] == "SCMP_ACT_ERRNO" for n in rule["names"]}
    assert not denied & {"unshare", "clone", "mount", "umount2", "pivot_root", "setns", "sethostname"}
    assert {"bpf", "keyctl", "kexec_load", "init_module", "perf_event_open", "userfaultfd", "io_uring_setup",
            "open_by_handle_at", "fsopen", "move_mount"} <= denied
    ds = next(d for d in _docs("dev") if d["kind"] == "DaemonSet")
    vols = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert vols["host"]["hostPath"]["path"] == "/var/lib/kubelet/seccomp"  # kubelet's seccomp root
    cmd = " ".join(ds["spec"]["template"]["spec"]["initContainers"][0]["command"])
    assert f"/host/{k8s.SECCOMP_PROFILE}" in cmd
    assert ds["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_mlflow_reads_its_database_uri_from_the_environment():
    docs = _docs("paper")
    svc = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "mlflow")
    port = svc["spec"]["ports"][0]["port"]
    assert k8s.MLFLOW_URI == f"http://{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc.cluster.local:{port}"
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "mlflow")
    assert svc["spec"]["selector"] == dep["spec"]["template"]["metadata"]["labels"]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    cmdline = " ".join(c.get("command", []) + c.get("args", []))
    assert "postgresql" not in cmdline and "PASSWORD" not in cmdline and "pip install" not in cmdline
    env = {e["name"]: e for e in c["env"]}
    assert env["MLFLOW_BACKEND_STORE_URI"]["value"].startswith("postgresql://mlflow:$(POSTGRES_PASSWORD)@")
    assert list(env).index("POSTGRES_PASSWORD") < list(env).index("MLFLOW_BACKEND_STORE_URI")  # $(VAR) order
    assert env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "mlflow-postgres"
    dockerfile = (REPO / "k8s" / "mlflow.Dockerfile").read_text()
    assert "psycopg2" in dockerfile and c["image"].split("/")[-1] in README


def test_images_dockerfile_and_dockerignore():
    dockerfile = (REPO / "k8s" / "Dockerfile").read_text()
    assert f"ARG BASE={k8s.CPU_BASE_IMAGE}" in dockerfile
    for img in (k8s.CPU_BASE_IMAGE, k8s.GPU_BASE_IMAGE, k8s.CPU_IMAGE, k8s.GPU_IMAGE):
        assert img in README, img
    assert k8s.CPU_BASE_IMAGE.startswith(f"rayproject/ray:{k8s.RAY_VERSION}-py311")
    assert k8s.GPU_BASE_IMAGE.startswith(f"rayproject/ray:{k8s.RAY_VERSION}-py311-")
    ignored = (REPO / ".dockerignore").read_text().split()
    for p in (".git", "results", "mlruns", "**/__pycache__", "bench/out", ".venv"):
        assert p in ignored, p


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_readme_states_each_overlays_cost(overlay):
    cost = k8s.overlay_cost(k8s.OVERLAYS[overlay])
    row = next((line for line in README.splitlines() if line.startswith(f"| `{overlay}`")), None)
    assert row, f"k8s/README.md: no cost row for {overlay}"
    assert f"{cost['gpus']:g} GPU" in row and f"{cost['cpus']:g} CPU" in row and f"{cost['memory_gi']:g} GiB" in row


def test_rayservice_builds_the_same_application_as_local_code():
    from ray.serve.schema import ServeDeploySchema

    from opteval.cluster.serve import llm_serving
    from opteval.sweepcore.config import as_plain, load_config, model_config

    svc = _by_kind(_docs("serve"), "RayService")[0]
    served = yaml.safe_load(svc["spec"]["serveConfigV2"])
    ServeDeploySchema(**served)  # Serve's schema of a config file accepts it
    app = served["applications"][0]
    assert app["import_path"] == "ray.serve.llm:build_openai_app"
    ov = k8s.OVERLAYS["serve"]
    local_cfg = load_config(list(ov.sweep_args))  # the sweep config a local run would use
    local = llm_serving.serve_app_config([as_plain(model_config(n)) for n in ov.service_models], local_cfg.serving)
    assert app == local
    ids = [c["model_loading_config"]["model_id"] for c in app["args"]["llm_configs"]]
    assert ids == list(ov.service_models)
    container = _cluster_spec(svc)["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    gpus = int(container["resources"]["limits"]["nvidia.com/gpu"])
    assert gpus >= len(ids)  # one replica of each model fits the one GPU pod
