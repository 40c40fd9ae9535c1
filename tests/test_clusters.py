"""Cluster files: Ray's own launcher validation, resources that satisfy the shipped configs, token auth, no secrets."""

import copy
import re
import shlex
from pathlib import Path

import pytest
import yaml

from distrl.config import load_config
from tests.conftest import ROOT

LAUNCHER_FILES = ["clusters/aws.yaml", "clusters/gcp.yaml"]
CLUSTER_CONFIG = ROOT / "configs" / "cartpole_cluster.yaml"


def launcher_validate(config: dict) -> dict:
    """What `ray up` does with the file before launching anything: fill defaults, then schema-check."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


@pytest.mark.parametrize("path", LAUNCHER_FILES)
def test_cluster_launcher_files_pass_rays_validation(path):
    prepared = launcher_validate(yaml.safe_load((ROOT / path).read_text()))
    assert set(prepared["available_node_types"]) == {"head", "cpu_rollout", "gpu_learner"}


def test_validation_rejects_a_broken_file():
    config = yaml.safe_load((ROOT / LAUNCHER_FILES[0]).read_text())
    del config["available_node_types"]["gpu_learner"]["node_config"]
    import jsonschema

    with pytest.raises(jsonschema.ValidationError, match="'node_config' is a required property"):
        launcher_validate(config)


def fits(node_resources: dict, node_labels: dict, request: dict, labels: dict) -> bool:
    return all(node_labels.get(k) == v for k, v in labels.items()) and all(
        node_resources.get(k, 0) >= v for k, v in request.items()
    )


def requests(config):
    worker = {"CPU": config.rollout.num_cpus_per_worker, **config.rollout.resources}
    learner = {
        "CPU": config.learner.num_cpus_per_learner,
        "GPU": config.learner.num_gpus_per_learner,
        **config.learner.resources,
    }
    return worker, learner


@pytest.mark.parametrize("path", LAUNCHER_FILES)
def test_node_types_satisfy_the_cluster_config(path):
    node_types = yaml.safe_load((ROOT / path).read_text())["available_node_types"]
    config = load_config(CLUSTER_CONFIG)
    worker, learner = requests(config)
    rollout_nodes = [
        n for n in node_types.values() if fits(n["resources"], n.get("labels", {}), worker, config.rollout.node_labels)
    ]
    learner_nodes = [
        n for n in node_types.values() if fits(n["resources"], n.get("labels", {}), learner, config.learner.node_labels)
    ]
    assert rollout_nodes and learner_nodes
    # At full scale the rollout nodes hold every worker, the learner nodes every learner.
    per_node = min(int(n["resources"]["CPU"] // worker["CPU"]) for n in rollout_nodes)
    assert sum(n["max_workers"] for n in rollout_nodes) * per_node >= config.rollout.max_workers
    assert sum(n["max_workers"] for n in learner_nodes) >= config.learner.num_learners
    # The head runs no actors.
    assert node_types["head"]["resources"] == {"CPU": 0}


@pytest.mark.parametrize("path", LAUNCHER_FILES)
def test_token_auth_on_dashboard_private_no_secrets(path):
    text = (ROOT / path).read_text()
    config = yaml.safe_load(text)
    starts = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    assert all("RAY_AUTH_MODE=token" in cmd for cmd in starts if "ray start" in cmd)
    head = " ".join(config["head_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in head and "0.0.0.0" not in head
    assert config["file_mounts"]["/home/ubuntu/.ray/auth_token"] == "~/.ray/auth_token"
    assert not re.search(r"AKIA[0-9A-Z]{16}|BEGIN [A-Z ]*PRIVATE KEY|RAY_AUTH_TOKEN=\w", text)
    assert not re.search(r"(?i)(secret|password|aws_secret_access_key)\s*:", text)


# --- the launcher files as a user runs them -------------------------------------------------------------


def launcher(path):
    return yaml.safe_load((ROOT / path).read_text())


def documented_submit(path) -> str:
    """The `ray job submit ... -- distrl train ...` command in the file's header, continuation lines joined."""
    header = [line[1:].strip() for line in (ROOT / path).read_text().splitlines() if line.startswith("#")]
    start = next(i for i, line in enumerate(header) if "ray job submit" in line)
    parts = [header[start]]
    while parts[-1].endswith("\\"):
        parts[-1] = parts[-1][:-1]
        parts.append(header[start + len(parts)])
    return " ".join(parts)


@pytest.mark.parametrize("path", LAUNCHER_FILES)
def test_head_keeps_rays_default_setup_for_its_autoscaler(path):
    import ray

    config = launcher(path)
    provider = config["provider"]["type"]
    defaults = yaml.safe_load((Path(ray.__file__).parent / "autoscaler" / provider / "defaults.yaml").read_text())
    commands = [c.split("#")[0].strip() for c in config["head_setup_commands"]]
    for default in defaults["head_setup_commands"]:  # aws: boto3; gcp: google-api-python-client
        assert default.split("#")[0].strip() in commands


@pytest.mark.parametrize("path", LAUNCHER_FILES)
def test_nodes_run_python_311_and_the_clients_ray_version(path):
    import ray

    config = launcher(path)
    setup = " ; ".join(config["setup_commands"])
    assert "--python 3.11 ~/venv" in setup and 'export PATH="$HOME/venv/bin:$PATH"' in setup
    assert f'"ray[default]=={ray.__version__}"' in setup  # the client's version, pinned on every node
    assert f"Ray on every node is {ray.__version__}" in (ROOT / path).read_text().splitlines()[0]


@pytest.mark.parametrize("path", LAUNCHER_FILES)
def test_cpu_nodes_install_the_cpu_torch_wheel_and_gpu_nodes_cuda(path):
    config = launcher(path)
    cpu_index = "--index-url https://download.pytorch.org/whl/cpu"
    types = config["available_node_types"]
    for commands, expect_cpu in (
        (config["head_setup_commands"], True),
        (types["cpu_rollout"]["worker_setup_commands"], True),
        (types["gpu_learner"]["worker_setup_commands"], False),
    ):
        torch_lines = [c for c in commands if '"torch==' in c]
        assert len(torch_lines) == 1 and (cpu_index in torch_lines[0]) == expect_cpu
        assert any('-e "/home/ubuntu/distrl[atari]"' in c for c in commands)
    assert not any("torch" in c for c in config["setup_commands"])  # never twice, never the wrong build


@pytest.mark.parametrize("path", LAUNCHER_FILES)
def test_code_is_shipped_once_and_results_go_to_a_bucket(path):
    config = launcher(path)
    assert config["file_mounts"]["/home/ubuntu/distrl"] == "."
    submit = documented_submit(path)
    assert "--working-dir" not in submit  # file_mounts ship the code; a working_dir would ship it a second time
    argv = shlex.split(submit.split(" -- ", 1)[1])
    from distrl.cli import build_parser

    args = build_parser().parse_args(argv[1:])
    assert args.storage.startswith(("s3://", "gs://")) and args.config.startswith("/home/ubuntu/distrl/")
    assert "RAY_JOB_STOP_WAIT_TIME_S" in submit


# --- the KubeRay RayJob, against the CRD's field names and the operator's validation rules ----------------

# Field names of the RayJob / RayCluster CRDs (KubeRay 1.5: ray-operator/apis/ray/v1) used at each level.
RAYJOB_SPEC = {
    "entrypoint",
    "runtimeEnvYAML",
    "shutdownAfterJobFinishes",
    "ttlSecondsAfterFinished",
    "backoffLimit",
    "rayClusterSpec",
    "submissionMode",
    "activeDeadlineSeconds",
    "entrypointNumCpus",
    "clusterSelector",
}
CLUSTER_SPEC = {
    "rayVersion",
    "authOptions",
    "enableInTreeAutoscaling",
    "autoscalerOptions",
    "headGroupSpec",
    "workerGroupSpecs",
    "gcsFaultToleranceOptions",
    "headServiceAnnotations",
    "suspend",
    "managedBy",
}
HEAD_GROUP = {"rayStartParams", "template", "resources", "labels", "serviceType", "headService", "enableIngress"}
WORKER_GROUP = {
    "groupName",
    "replicas",
    "minReplicas",
    "maxReplicas",
    "idleTimeoutSeconds",
    "rayStartParams",
    "template",
    "resources",
    "labels",
    "scaleStrategy",
    "numOfHosts",
    "suspend",
}
AUTOSCALER = {
    "version",
    "upscalingMode",
    "idleTimeoutSeconds",
    "resources",
    "image",
    "imagePullPolicy",
    "env",
    "envFrom",
    "volumeMounts",
    "securityContext",
}
RESOURCE_PARAMS = ("num-cpus", "num-gpus", "memory", "resources")  # validateRayGroupResources
QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def kuberay():
    return yaml.safe_load((ROOT / "clusters" / "kuberay-rayjob.yaml").read_text())


def test_kuberay_rayjob_uses_only_crd_fields_and_passes_the_operators_validation():
    manifest = kuberay()
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == "RayJob"
    assert re.fullmatch(r"[a-z]([-a-z0-9]{0,45}[a-z0-9])?", manifest["metadata"]["name"])  # DNS-1035, <= 47 chars
    spec = manifest["spec"]
    cluster = spec["rayClusterSpec"]
    assert set(spec) <= RAYJOB_SPEC and set(cluster) <= CLUSTER_SPEC and set(cluster["autoscalerOptions"]) <= AUTOSCALER
    groups = [("Head", cluster["headGroupSpec"], HEAD_GROUP)] + [
        (g["groupName"], g, WORKER_GROUP) for g in cluster["workerGroupSpecs"]
    ]
    for name, group, allowed in groups:
        assert set(group) <= allowed, (name, set(group) - allowed)
        params = group.get("rayStartParams", {})
        assert "labels" not in params, f"{name}: rayStartParams['labels'] is refused since KubeRay 1.5.0"
        assert not (group.get("resources") and any(params.get(k) for k in RESOURCE_PARAMS)), (
            f"{name}: resources set twice"
        )
        for key, value in group.get("labels", {}).items():
            assert (
                QUALIFIED_NAME.match(key)
                and len(key.split("/")[-1]) <= 63
                and LABEL_VALUE.match(value)
                and len(value) <= 63
            )
        assert group["template"]["spec"].get("restartPolicy", "Never") == "Never"  # autoscaler v2
    assert cluster["enableInTreeAutoscaling"] is True and cluster["autoscalerOptions"]["version"] == "v2"
    assert cluster["authOptions"] == {"mode": "token"}
    major, minor, _ = (int(x) for x in cluster["rayVersion"].split("."))
    assert (major, minor) >= (2, 52)  # token auth needs Ray >= 2.52.0
    assert (
        spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] >= 0 and spec["backoffLimit"] >= 0
    )
    yaml.safe_load(spec["runtimeEnvYAML"])  # the operator refuses a runtimeEnvYAML that is not YAML


def test_kuberay_versions_images_gpu_scheduling_and_storage_are_consistent():
    import ray

    cluster = kuberay()["spec"]["rayClusterSpec"]
    assert cluster["rayVersion"] == ray.__version__
    dockerfile = (ROOT / "clusters" / "Dockerfile").read_text()
    assert f"FROM rayproject/ray:{ray.__version__}-py311-${{VARIANT}}" in dockerfile
    groups = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    images = {name: g["template"]["spec"]["containers"][0]["image"] for name, g in groups.items()}
    images["head"] = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
    assert images == {
        "head": "YOUR_REGISTRY/distrl:0.1.0-cpu",
        "cpu-rollout": "YOUR_REGISTRY/distrl:0.1.0-cpu",
        "gpu-learner": "YOUR_REGISTRY/distrl:0.1.0-gpu",
    }
    gpu = groups["gpu-learner"]["template"]["spec"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in gpu["tolerations"]
    assert gpu["nodeSelector"] and "tolerations" not in groups["cpu-rollout"]["template"]["spec"]
    for name in groups:
        assert groups[name]["minReplicas"] == 0 < groups[name]["maxReplicas"]  # the autoscaler adds them on demand
    assert yaml.safe_load(kuberay()["spec"]["runtimeEnvYAML"])["env_vars"]["RAY_JOB_STOP_WAIT_TIME_S"]


def test_kuberay_rayjob_runs_a_valid_distrl_command_its_groups_can_hold():
    spec = kuberay()["spec"]
    argv = shlex.split(spec["entrypoint"])
    assert argv[:2] == ["distrl", "train"]
    from distrl.cli import build_parser

    args = build_parser().parse_args(argv[1:])
    assert args.storage.startswith("s3://")  # results outlive the cluster
    config_path = ROOT / args.config.removeprefix("/home/ray/distrl/")  # the image holds this checkout there
    config = load_config(config_path, args.set)
    worker, learner = requests(config)
    groups = {g["groupName"]: g for g in spec["rayClusterSpec"]["workerGroupSpecs"]}
    assert set(groups) == {"cpu-rollout", "gpu-learner"}

    def node(group):
        resources = {k: float(v) for k, v in group["resources"].items()}
        limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert float(limits["cpu"]) >= resources["CPU"] and int(limits.get("nvidia.com/gpu", 0)) >= resources.get(
            "GPU", 0
        )
        return resources, group["labels"]

    assert fits(*node(groups["cpu-rollout"]), worker, config.rollout.node_labels)
    assert fits(*node(groups["gpu-learner"]), learner, config.learner.node_labels)
    assert groups["cpu-rollout"]["maxReplicas"] * node(groups["cpu-rollout"])[0]["CPU"] >= config.rollout.max_workers
