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


def test_the_rank_variables_win_over_slurm():  # srun starting torchrun: the ranks are torchrun's
    ctx = RankContext.from_env({"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"})
    assert ctx.rank == 1 and ctx.launcher == "env"
    ctx = RankContext.from_env({"RANK": "1", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "x", "SLURM_PROCID": "0"})
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


# Each launcher's own variables, as its documentation and source set them (docs/integrations.md's table).
LAUNCHES = {
    "mpich": (
        {"PMI_RANK": "5", "PMI_SIZE": "8", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "4"},
        (5, 1, 8, 4, 1),
    ),
    "deepspeed": (
        {"RANK": "6", "LOCAL_RANK": "2", "WORLD_SIZE": "8", "LOCAL_SIZE": "4", "CROSS_RANK": "1", "CROSS_SIZE": "2"},
        (6, 2, 8, 4, 1),
    ),
    "ray": (
        {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "NODE_RANK": "1"},
        (5, 1, 8, 4, 1),
    ),
    "kubeflow": (
        {"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "KUBERNETES_PORT": "x"},
        (3, 0, 4, 1, 3),
    ),
    "torchrun": (  # also what `accelerate launch` runs for several processes
        {
            "RANK": "5",
            "LOCAL_RANK": "1",
            "WORLD_SIZE": "8",
            "LOCAL_WORLD_SIZE": "4",
            "GROUP_RANK": "1",
            "TORCHELASTIC_RUN_ID": "none",
        },
        (5, 1, 8, 4, 1),
    ),
}


@pytest.mark.parametrize("launcher", sorted(LAUNCHES))
def test_each_launcher_is_read_from_its_own_variables(launcher):
    env, expected = LAUNCHES[launcher]
    ctx = RankContext.from_env(env)
    assert (ctx.rank, ctx.local_rank, ctx.world_size, ctx.local_world_size, ctx.node_rank) == expected
    assert ctx.launcher == launcher


def test_a_pod_under_torchrun_is_not_taken_for_one_process_per_pod():
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "MASTER_ADDR": "m", "KUBERNETES_SERVICE_HOST": "k"}
    ctx = RankContext.from_env(env)
    assert ctx.launcher == "env" and ctx.local_rank == 1


def test_the_group_numbers_the_ranks_of_one_host_in_rank_order():
    from telemetry.rank import from_group

    base = RankContext.from_env({})
    hosts = ["a", "b", "a", "b", "a"]
    got = [from_group(r, 5, hosts, base._replace(node=hosts[r])) for r in range(5)]
    assert [(c.local_rank, c.local_world_size, c.node_rank) for c in got] == [
        (0, 3, 0),
        (0, 2, 1),
        (1, 3, 0),
        (1, 2, 1),
        (2, 3, 0),
    ]
    assert {c.launcher for c in got} == {"process_group"}
    lonely = from_group(1, 3, [None, "a", None], base._replace(node="a"))  # peers that never posted
    assert (lonely.rank, lonely.local_rank, lonely.local_world_size) == (1, 0, 1)


def test_a_group_may_come_when_started_by_multiprocessing_or_given_a_rendezvous(monkeypatch):
    from telemetry.rank import group_may_come

    assert group_may_come({}) is False
    assert group_may_come({"MASTER_ADDR": "127.0.0.1"}) is True
    import multiprocessing

    monkeypatch.setattr(multiprocessing, "parent_process", lambda: object())
    assert group_may_come({}) is True
