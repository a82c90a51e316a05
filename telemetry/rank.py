"""Where this process sits in the job: rank, local rank, world size, node.

Read once at ``init`` from the launcher's environment: torchrun / torchelastic (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``), then SLURM (``SLURM_PROCID``,
``SLURM_LOCALID``, ``SLURM_NTASKS``, ``SLURM_NTASKS_PER_NODE``, ``SLURM_NODEID``), then Open MPI
(``OMPI_COMM_WORLD_*``). With none of them the process is rank 0 of a world of 1.

The node is SLURM's name for it (``SLURMD_NODENAME``) under SLURM, else the host name. In a
Kubernetes pod (``KUBERNETES_SERVICE_HOST`` set) the pod's name (``POD_NAME``, else the host name,
which Kubernetes sets to it) and namespace (``POD_NAMESPACE``, else the service account's namespace
file) are kept too: the run store's rank meta and the Prometheus targets carry them as labels.

>>> RankContext.from_env({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}).rank
3
"""

from __future__ import annotations

import os
import re
import socket
from typing import Mapping, NamedTuple

from .config import ConfigError

# (rank, local_rank, world_size, local_world_size, node_rank) per launcher, first match wins.
_LAUNCHERS = (
    ("torchrun", ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")),
    ("slurm", ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE", "SLURM_NODEID")),
    (
        "openmpi",
        (
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
            "OMPI_COMM_WORLD_NODE_RANK",
        ),
    ),
)


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
        env = os.environ if environ is None else environ
        host = env.get("SLURMD_NODENAME") or socket.gethostname()
        pod, namespace = _kubernetes(env, host)
        for launcher, keys in _LAUNCHERS:
            if keys[0] not in env:
                continue
            rank = _int(env, keys[0], 0)
            world = _int(env, keys[2], 1, minimum=1)
            local_rank = _int(env, keys[1], rank)
            local_world = _local_world(env, keys[3], world)
            node_rank = _int(env, keys[4], rank // max(local_world, 1))
            if rank >= world:
                raise ConfigError(f"{keys[0]}={rank} must be below {keys[2]}={world}")
            if local_rank >= local_world:
                raise ConfigError(f"{keys[1]}={local_rank} must be below {keys[3]}={local_world}")
            return cls(rank, local_rank, world, local_world, node_rank, host, launcher, pod, namespace)
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
    """(pod, namespace) inside a Kubernetes pod, else ("", "")."""
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
