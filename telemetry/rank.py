"""Where this process sits in the job: rank, local rank, world size, node (:class:`RankContext`).

Read at ``init`` from the launcher's environment, first match wins (kubeflow, torchrun, deepspeed, ray,
any ``RANK``, slurm, openmpi, mpich: each launcher's variables are in docs/integrations.md, "Launchers");
with none of them, ``torch.distributed``'s process group is the truth (:func:`from_group`,
:func:`group_may_come`), and where the two disagree the group wins. The node is ``SLURMD_NODENAME``
under SLURM, else the host name; in a Kubernetes pod its name and namespace are kept too (:func:`_kubernetes`).

>>> RankContext.from_env({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}).rank
3
>>> RankContext.from_env({"PMI_RANK": "5", "PMI_SIZE": "8", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "4"})[:5]
(5, 1, 8, 4, 1)
"""

from __future__ import annotations

import os
import re
import socket
from typing import TYPE_CHECKING, Mapping, NamedTuple

if TYPE_CHECKING:
    from types import ModuleType

    from torch._C._distributed_c10d import Store  # torch.distributed.Store

from .config import ConfigError

_TORCHRUN = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")


class _Launcher(NamedTuple):
    name: str
    keys: tuple[str, str, str, str, str]  # rank, local_rank, world_size, local_world_size, node_rank
    detect: tuple[str, ...]  # variables only this launcher sets (any of them, beside keys[0]); () when keys[0] says it
    one_per_node: bool = False  # no local variables: one process per node (pod)


# First match wins: the specific ones before the generic RANK / WORLD_SIZE.
_LAUNCHERS = (
    _Launcher("torchrun", _TORCHRUN, ("TORCHELASTIC_RUN_ID", "GROUP_RANK")),
    _Launcher("deepspeed", ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_SIZE", "CROSS_RANK"), ("CROSS_RANK",)),
    _Launcher("ray", ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK"), ("NODE_RANK",)),
    _Launcher("kubeflow", ("RANK", "", "WORLD_SIZE", "", ""), (), one_per_node=True),
    _Launcher("env", _TORCHRUN, ()),
    _Launcher("slurm", ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE", "SLURM_NODEID"), ()),
    _Launcher(
        "openmpi",
        (
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
            "OMPI_COMM_WORLD_NODE_RANK",
        ),
        (),
    ),
    _Launcher("mpich", ("PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE", "MPI_LOCALNRANKS", ""), ()),
)
LAUNCHERS = tuple(x.name for x in _LAUNCHERS)


def _matches(launcher: _Launcher, env: Mapping[str, str]) -> bool:
    if launcher.keys[0] not in env or (launcher.detect and not any(k in env for k in launcher.detect)):
        return False
    if launcher.one_per_node:  # Kubeflow's PyTorchJob: in a pod, with a rendezvous, without torchrun's
        in_pod = "KUBERNETES_SERVICE_HOST" in env or "KUBERNETES_PORT" in env
        local = any(k in env for k in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"))
        return in_pod and "MASTER_ADDR" in env and not local
    return True


class RankContext(NamedTuple):
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    node: str  # host name (SLURM's node name under SLURM)
    launcher: str  # torchrun, slurm, openmpi or none
    pod: str = ""  # Kubernetes pod name, "" outside Kubernetes
    namespace: str = ""  # Kubernetes namespace, "" outside Kubernetes

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "RankContext":
        """From the launcher's variables (the table above); ``launcher`` is "none" when no launcher
        said anything: rank 0 of a world of 1, unless the process group says otherwise later."""
        env = os.environ if environ is None else environ
        host = env.get("SLURMD_NODENAME") or socket.gethostname()
        pod, namespace = _kubernetes(env, host)
        for launcher in _LAUNCHERS:
            if not _matches(launcher, env):
                continue
            keys = launcher.keys
            rank = _int(env, keys[0], 0)
            world = _int(env, keys[2], 1, minimum=1)
            if launcher.one_per_node:
                local_rank, local_world, node_rank = 0, 1, rank
            else:
                local_rank = _int(env, keys[1], rank)
                local_world = _local_world(env, keys[3], world)
                node_rank = _int(env, keys[4], rank // max(local_world, 1)) if keys[4] else rank // max(local_world, 1)
            if rank >= world:
                raise ConfigError(f"{keys[0]}={rank} must be below {keys[2]}={world}")
            if local_rank >= local_world:
                raise ConfigError(f"{keys[1]}={local_rank} must be below {keys[3]}={local_world}")
            return cls(rank, local_rank, world, local_world, node_rank, host, launcher.name, pod, namespace)
        return cls(0, 0, 1, 1, 0, host, "none", pod, namespace)

    def labels(self) -> dict[str, str]:
        """The labels every per-rank series carries (besides ``job``)."""
        return {"rank": str(self.rank), "local_rank": str(self.local_rank), "node": self.node}

    def placement_labels(self) -> dict[str, str]:
        """Where the rank runs, when a scheduler says more than the node: Kubernetes' pod and
        namespace. Target labels (Prometheus adds them to every series it scrapes from the rank)."""
        return {k: v for k, v in (("pod", self.pod), ("namespace", self.namespace)) if v}


_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def _kubernetes(env: Mapping[str, str], host: str, namespace_file: str = _NAMESPACE_FILE) -> tuple[str, str]:
    """(pod, namespace) inside a Kubernetes pod, else ("", ""): ``POD_NAME``, else the host name
    (which Kubernetes sets to it), and ``POD_NAMESPACE``, else the service account's namespace file.
    The run store's rank meta and the Prometheus targets carry them as labels."""
    if "KUBERNETES_SERVICE_HOST" not in env and "POD_NAME" not in env:
        return "", ""
    pod = env.get("POD_NAME") or host
    namespace = env.get("POD_NAMESPACE", "")
    if not namespace:
        try:
            with open(namespace_file) as f:
                namespace = f.read().strip()
        except OSError:
            namespace = ""
    return pod, namespace


def _int(env: Mapping[str, str], key: str, default: int, minimum: int = 0) -> int:
    raw = env.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{key}={raw!r} is not an integer; accepted: an integer >= {minimum}") from None
    if value < minimum:
        raise ConfigError(f"{key}={value} is invalid; accepted: an integer >= {minimum}")
    return value


def _local_world(env: Mapping[str, str], key: str, world: int) -> int:
    raw = env.get(key)
    if raw and not raw.isdigit():
        # SLURM_NTASKS_PER_NODE may read "4(x2)" or "4,2": the first count is this layout's.
        m = re.match(r"^(\d+)", raw)
        if not m:
            raise ConfigError(f"{key}={raw!r} cannot be read; accepted: an integer like 8 or 8(x4)")
        return max(int(m.group(1)), 1)
    return _int(env, key, world, minimum=1)


# ---- the process group, when the environment is silent ------------------------------------------
HOSTS_PREFIX = "telemetry/host/"  # + rank: each rank's host name, posted to the group's store


def group_rank(dist: ModuleType | None) -> tuple[int, int] | None:
    """(rank, world size) of the initialized default process group, or None."""
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # noqa: BLE001 - a half-built group is no group yet
        return None
    return None


def group_may_come(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a process group is likely on its way although no launcher said a rank: the process
    was started by ``multiprocessing`` (``torch.multiprocessing.spawn``, a Pool) or a rendezvous
    address is set (``MASTER_ADDR``/``MASTER_PORT``)."""
    import multiprocessing

    env = os.environ if environ is None else environ
    return multiprocessing.parent_process() is not None or "MASTER_ADDR" in env or "MASTER_PORT" in env


def exchange_hosts(store: Store, rank: int, world: int, host: str, timeout_s: float) -> list[str | None]:
    """Post this rank's host to the group's store and read every rank's, waiting up to ``timeout_s``
    for them; a rank that has not posted by then is None (it is then counted on no host)."""
    import time

    store.set(f"{HOSTS_PREFIX}{rank}", host)
    keys = [f"{HOSTS_PREFIX}{r}" for r in range(world)]
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if store.check(keys):
                break
        except Exception:  # noqa: BLE001 - a store without check: read what is there below
            break
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    out: list[str | None] = []
    for key in keys:
        try:
            out.append(store.get(key).decode() if store.check([key]) else None)
        except Exception:  # noqa: BLE001 - unreadable: on no host
            out.append(None)
    return out


def from_group(rank: int, world: int, hosts: list[str | None], base: "RankContext") -> "RankContext":
    """The group's rank and world size, the local rank and local world from the ranks that share this
    host (in rank order), the node rank from the hosts' first ranks; host, pod and namespace from
    ``base`` (the environment's)."""
    host = hosts[rank] if rank < len(hosts) and hosts[rank] else base.node
    same = [r for r, h in enumerate(hosts) if h == host]
    if rank not in same:
        same = sorted(same + [rank])
    firsts = sorted({min(r for r, h in enumerate(hosts) if h == x) for x in set(hosts) if x is not None} | {same[0]})
    return base._replace(
        rank=rank,
        local_rank=same.index(rank),
        world_size=world,
        local_world_size=len(same),
        node_rank=firsts.index(same[0]),
        launcher="process_group",
    )
