"""Cluster files: Ray's own launcher validation, resources that satisfy the shipped configs, token auth, no secrets."""

import copy
import re
import shlex

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
    with pytest.raises(Exception):
        launcher_validate(config)


def fits(node_resources: dict, node_labels: dict, request: dict, labels: dict) -> bool:
    return all(node_labels.get(k) == v for k, v in labels.items()) and all(
        node_resources.get(k, 0) >= v for k, v in request.items()
    )


def requests(config):
    worker = {"CPU": config.rollout.num_cpus_per_worker, **config.rollout.resources}
    learner = {"CPU": config.learner.num_cpus_per_learner, "GPU": config.learner.num_gpus_per_learner, **config.learner.resources}
    return worker, learner


@pytest.mark.parametrize("path", LAUNCHER_FILES)
def test_node_types_satisfy_the_cluster_config(path):
    node_types = yaml.safe_load((ROOT / path).read_text())["available_node_types"]
    config = load_config(CLUSTER_CONFIG)
    worker, learner = requests(config)
    rollout_nodes = [n for n in node_types.values() if fits(n["resources"], n.get("labels", {}), worker, config.rollout.node_labels)]
    learner_nodes = [n for n in node_types.values() if fits(n["resources"], n.get("labels", {}), learner, config.learner.node_labels)]
    assert rollout_nodes and learner_nodes
    # At full scale the rollout nodes hold every worker, the learner nodes every learner.
    per_node = min(int(n["resources"]["CPU"] // worker["CPU"]) for n in rollout_nodes)
    assert sum(n["max_workers"] for n in rollout_nodes) * per_node >= config.rollout.num_workers
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


def test_kuberay_rayjob_runs_a_valid_distrl_command():
    manifest = yaml.safe_load((ROOT / "clusters" / "kuberay-rayjob.yaml").read_text())
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == "RayJob"
    spec = manifest["spec"]
    assert spec["rayClusterSpec"]["authOptions"] == {"mode": "token"}
    argv = shlex.split(spec["entrypoint"])
    assert argv[:2] == ["distrl", "train"]
    from distrl.cli import build_parser

    args = build_parser().parse_args(argv[1:])
    config_path = ROOT / args.config.removeprefix("/home/ray/distrl/")  # the image holds this checkout there
    config = load_config(config_path, args.set)
    worker, learner = requests(config)
    groups = {g["groupName"]: g for g in spec["rayClusterSpec"]["workerGroupSpecs"]}
    assert set(groups) == {"cpu-rollout", "gpu-learner"}

    def node(group):
        params = group["rayStartParams"]
        resources = {"CPU": float(params["num-cpus"]), "GPU": float(params.get("num-gpus", 0)),
                     **yaml.safe_load(yaml.safe_load(params["resources"]))}  # fmt: skip
        labels = dict(item.split("=") for item in params["labels"].split(","))
        limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert float(limits["cpu"]) >= resources["CPU"] and int(limits.get("nvidia.com/gpu", 0)) >= resources["GPU"]
        return resources, labels

    assert fits(*node(groups["cpu-rollout"]), worker, config.rollout.node_labels)
    assert fits(*node(groups["gpu-learner"]), learner, config.learner.node_labels)
    assert groups["cpu-rollout"]["maxReplicas"] * node(groups["cpu-rollout"])[0]["CPU"] >= config.rollout.num_workers
