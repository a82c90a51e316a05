"""Where a rank sits (telemetry/rank.py), as each launcher says it: torchrun (across nodes), SLURM (its
node name), Kubernetes (pod and namespace, as labels on the rank's Prometheus target and in the run
store); bad launcher variables name themselves."""

import json
import os

import pytest

from telemetry.config import ConfigError
from telemetry.rank import RankContext, _kubernetes
from tests.helpers.servers import free_port_range


def test_rank_from_torchrun():
    ctx = RankContext.from_env(
        {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1"}
    )
    assert (ctx.rank, ctx.local_rank, ctx.world_size, ctx.local_world_size, ctx.node_rank) == (5, 1, 8, 4, 1)
    assert ctx.launcher == "torchrun"


def test_rank_from_slurm_with_compressed_tasks_per_node():
    ctx = RankContext.from_env(
        {
            "SLURM_PROCID": "9",
            "SLURM_LOCALID": "1",
            "SLURM_NTASKS": "16",
            "SLURM_NTASKS_PER_NODE": "8(x2)",
            "SLURM_NODEID": "1",
        }
    )
    assert (ctx.rank, ctx.local_rank, ctx.world_size, ctx.local_world_size, ctx.node_rank) == (9, 1, 16, 8, 1)
    assert ctx.launcher == "slurm"


def test_torchrun_wins_over_slurm():
    ctx = RankContext.from_env({"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"})
    assert ctx.rank == 1 and ctx.launcher == "torchrun"


def test_no_environment_is_a_single_rank():
    ctx = RankContext.from_env({})
    assert (ctx.rank, ctx.world_size, ctx.launcher) == (0, 1, "none")


@pytest.mark.parametrize(
    "env, message",
    [
        ({"RANK": "x", "WORLD_SIZE": "2"}, r"RANK='x' is not an integer"),
        ({"RANK": "4", "WORLD_SIZE": "4"}, r"RANK=4 must be below WORLD_SIZE=4"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, r"WORLD_SIZE=0 is invalid; accepted: an integer >= 1"),
    ],
)
def test_bad_rank_variables(env, message):
    with pytest.raises(ConfigError, match=message):
        RankContext.from_env(env)


def test_torchrun_on_the_second_of_two_nodes():
    # torchrun --nnodes 2 --nproc_per_node 4, this process: the second node's local rank 3
    ctx = RankContext.from_env(
        {
            "RANK": "7",
            "LOCAL_RANK": "3",
            "WORLD_SIZE": "8",
            "LOCAL_WORLD_SIZE": "4",
            "GROUP_RANK": "1",
            "ROLE_RANK": "7",
            "MASTER_ADDR": "node-a",
        }
    )
    assert (ctx.rank, ctx.local_rank, ctx.world_size, ctx.local_world_size, ctx.node_rank) == (7, 3, 8, 4, 1)
    assert ctx.placement_labels() == {}


def test_torchrun_without_group_rank_derives_the_node_from_the_layout():
    ctx = RankContext.from_env({"RANK": "6", "LOCAL_RANK": "2", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"})
    assert ctx.node_rank == 1


def test_slurm_names_the_node_as_slurm_does():
    ctx = RankContext.from_env(
        {
            "SLURM_PROCID": "13",
            "SLURM_LOCALID": "5",
            "SLURM_NTASKS": "16",
            "SLURM_NTASKS_PER_NODE": "8",
            "SLURM_NODEID": "1",
            "SLURMD_NODENAME": "gpu-017",
        }
    )
    assert (ctx.rank, ctx.local_rank, ctx.node_rank, ctx.node, ctx.launcher) == (13, 5, 1, "gpu-017", "slurm")


def test_kubernetes_pod_and_namespace_from_the_downward_api_or_the_service_account(tmp_path):
    env = {
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "POD_NAME": "trainer-worker-3",
        "POD_NAMESPACE": "research",
        "RANK": "3",
        "WORLD_SIZE": "4",
    }
    ctx = RankContext.from_env(env)
    assert ctx.placement_labels() == {"pod": "trainer-worker-3", "namespace": "research"}
    ns = tmp_path / "namespace"
    ns.write_text("ml-team\n")
    # without the downward API: the pod's host name is its name, the namespace from the mounted file
    assert _kubernetes({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "trainer-0", str(ns)) == ("trainer-0", "ml-team")
    assert _kubernetes({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "trainer-0", str(tmp_path / "none")) == (
        "trainer-0",
        "",
    )
    assert _kubernetes({}, "laptop") == ("", "")  # not in Kubernetes: no labels at all


def test_a_pod_s_labels_reach_its_prometheus_target_and_the_run_store(tmp_path, monkeypatch):
    import telemetry

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("POD_NAME", "trainer-worker-0")
    monkeypatch.setenv("POD_NAMESPACE", "research")
    run_dir = str(tmp_path / "run")
    telemetry.init(
        run_dir=run_dir, job="k8s", sinks=["store", "prometheus"], prometheus_port=free_port_range(1), announce=False
    )
    with telemetry.step():
        pass
    telemetry.shutdown()
    [entry] = json.load(open(os.path.join(run_dir, "prometheus_targets.json")))
    assert entry["labels"]["pod"] == "trainer-worker-0" and entry["labels"]["namespace"] == "research"
    meta = json.load(open(os.path.join(run_dir, "ranks", "rank-00000.json")))
    assert (meta["pod"], meta["namespace"]) == ("trainer-worker-0", "research")
