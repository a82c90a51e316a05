"""Which parallel dimension a collective belongs to: every process group gets a label (:func:`group_info`).

A DeviceMesh dimension with a name gives its groups that name (known from a mesh built after ``init``,
:func:`watch_meshes`; from a functional collective's ``(mesh, dim)``, :func:`mesh_dim_info`; or from
torch's own ``mesh_<name>`` group description, for a mesh built before ``init``); the default group and
any group of every rank is ``world`` (unless a named dimension is that group); any other is ``g`` and 8
hex digits of a hash of its ranks (:func:`of_ranks`). Labels are read once per group and are valid
Prometheus label values and column names. More: docs/collectives.md, "Parallel dimensions".
"""

from __future__ import annotations

import hashlib
import re
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterable

if TYPE_CHECKING:
    from types import ModuleType

    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh

WORLD = "world"
_LABEL = re.compile(r"[^A-Za-z0-9_]")

# id(group), or None for the default group -> (a weak reference to the group, (size, label)). An entry
# holds only while its group lives: a group created at a destroyed group's address, or a default group
# made by a new init_process_group, is read afresh instead of being taken for the old one.
_cache: dict[int | None, tuple[weakref.ref, tuple[int, str]]] = {}
# a process group's name (torch's group_name) -> the mesh dimension's name it serves
_dims: dict[str, str] = {}
# id(group), or None for the default group -> (a weak reference to the group, (its instance id, its counter)):
# the instance a collective is numbered in, and its counter (:func:`instance`, :func:`next_seq`)
_instances: dict[int | None, tuple[weakref.ref, tuple[str, list[int]]]] = {}
# instance id -> (label, global ranks): every group instance this session has called a collective in (a
# handful; emptied as a session instruments the collectives, and kept past its shutdown, for its store's
# last write); the store keeps them once per rank (RUN_DIR/ranks/rank-N.groups.json), not on every record
known: dict[str, tuple[str, list[int]]] = {}
_mesh_init: tuple[type, Callable[..., None]] | None = (
    None  # DeviceMesh and its __init__ as torch has it, while ours is installed
)


def clean(name: str) -> str:
    """A dimension's name as a label: letters, digits and underscores only."""
    return _LABEL.sub("_", str(name))[:40] or "unnamed"


def group_info(dist: ModuleType, group: ProcessGroup | None) -> tuple[int, str]:
    """(size, label) of ``group`` (None: the default group)."""
    key = None if group is None else id(group)
    entry = _cache.get(key)
    if entry is not None:
        live = entry[0]()
        if live is not None and (group is None or live is group):
            return entry[1]
    info = _read(dist, group)
    target = dist.group.WORLD if group is None else group
    if target is not None:  # None: not initialized, nothing to remember
        try:
            _cache[key] = (weakref.ref(target), info)
        except TypeError:  # not weak-referenceable: read each time rather than risk a stale entry
            pass
    return info


def _read(dist: ModuleType, group: ProcessGroup | None) -> tuple[int, str]:
    try:
        size = dist.get_world_size(group)
    except Exception:  # noqa: BLE001 - not initialized, or not a member
        size = 0
    return size, label_of(dist, group, size)


def label_of(dist: ModuleType, group: ProcessGroup | None, size: int) -> str:
    target = dist.group.WORLD if group is None else group
    name = getattr(target, "group_name", None)
    if name is not None and str(name) in _dims:
        return _dims[str(name)]
    desc = str(getattr(target, "group_desc", "") or "")
    if desc.startswith("mesh_") and not re.fullmatch(r"mesh_(dim_\d+|default)", desc):
        return clean(desc[5:])
    try:
        world = dist.get_world_size()
    except Exception:  # noqa: BLE001 - not initialized
        world = -1
    if group is None or target is dist.group.WORLD or (size > 0 and size == world):
        return WORLD
    try:
        ranks = dist.get_process_group_ranks(target)
    except Exception:  # noqa: BLE001 - not a member, or not a group torch knows
        ranks = [id(target)]
    return of_ranks(ranks)


def instance(dist: ModuleType, group: ProcessGroup | None, label: str) -> tuple[str, list[int]]:
    """(instance id, its call counter) of ``group`` (None: the default group); ("", a counter of its own)
    when torch cannot say its ranks. The id is ``g`` and 8 hex digits of torch's name for the group and its
    global ranks: the same on each of its ranks, and apart for two groups of one mesh dimension (the two
    tp groups of a 2x2 mesh) or two groups of the same ranks (the world and a dimension over every rank).

    The counter (``[n]``) counts the group's collectives as telemetry times them, from 1, the caller adding
    1 as it issues one (:func:`next_seq`): every rank of a group calls its collectives in the same order,
    so a call has the same number on each. Not torch's own count (``_get_sequence_number_for_group``,
    Flight Recorder's ``collective_seq_id``): on gloo that one counts the point-to-point ops too, which
    only two ranks of the group make, so the numbers of later calls part between ranks; and it counts calls
    telemetry never sees (DDP's broadcast of the model at construction, calls before ``init``)."""
    key = None if group is None else id(group)
    entry = _instances.get(key)
    if entry is not None:
        live = entry[0]()
        if live is not None and (group is None or live is group):
            return entry[1]
    target = dist.group.WORLD if group is None else group
    try:
        ranks = [int(r) for r in dist.get_process_group_ranks(target)]
    except Exception:  # noqa: BLE001 - not initialized, not a member, or not a group torch knows
        return "", [0]
    gid = of_ranks([str(getattr(target, "group_name", "")), *map(str, ranks)])
    known[gid] = (label, ranks)
    info = (gid, [0])
    try:
        _instances[key] = (weakref.ref(target), info)
    except TypeError:  # not weak-referenceable: read each time (and count nothing) rather than risk a stale entry
        pass
    return info


def next_seq(counter: list[int]) -> int:
    """The number of the call being issued in a group (its counter from :func:`instance`)."""
    counter[0] += 1
    return counter[0]


# (instance id, global source rank, global destination rank) -> point-to-point ops so far
_p2p: dict[tuple[str, int, int], int] = {}


def p2p_seq(gid: str, src: int, dst: int) -> int:
    """The number of a send from ``src`` to ``dst`` (global ranks) in group instance ``gid``, counted per
    direction of the pair, from 1: the k-th send's matching recv, on the other rank, is its k-th recv from
    that sender (Flight Recorder's ``p2p_seq_id`` counts per pair likewise)."""
    key = (gid, src, dst)
    n = _p2p.get(key, 0) + 1
    _p2p[key] = n
    return n


def of_ranks(ranks: Iterable[int | str]) -> str:
    """The label of an unnamed group of ``ranks``: ``g`` and 8 hex digits, the same on each of them."""
    digest = hashlib.blake2b(",".join(map(str, ranks)).encode(), digest_size=4).hexdigest()
    return f"g{digest}"


def learn_mesh(mesh: DeviceMesh) -> None:
    """Remember the names of ``mesh``'s dimensions' groups (a mesh without names teaches nothing)."""
    names = getattr(mesh, "mesh_dim_names", None)
    groups = getattr(mesh, "_dim_group_names", None)
    if not names or not groups:
        return
    new = False
    for dim_name, group_name in zip(names, groups):
        if group_name is not None and _dims.get(str(group_name)) != clean(dim_name):
            _dims[str(group_name)] = clean(dim_name)
            new = True
    if new:
        _cache.clear()  # a group read before may now have a name


def mesh_dim_info(mesh: DeviceMesh, dim: int) -> tuple[int, str] | None:
    """(size, label) of dimension ``dim`` of DeviceMesh ``mesh``, when it has a name."""
    names = getattr(mesh, "mesh_dim_names", None)
    if not names:
        return None
    learn_mesh(mesh)
    try:
        return int(mesh.size(dim)), clean(names[dim])
    except Exception:  # noqa: BLE001 - not a mesh as we know it
        return None


def watch_meshes() -> None:
    """Wrap ``DeviceMesh.__init__`` so that every mesh built from now on names its groups; idempotent.
    Imports nothing that was not imported (no DeviceMesh module: nothing to watch yet)."""
    global _mesh_init
    import sys

    module = sys.modules.get("torch.distributed.device_mesh")
    mesh_cls = getattr(module, "DeviceMesh", None) if module is not None else None
    if mesh_cls is None or _mesh_init is not None:
        return
    original = mesh_cls.__init__

    def __init__(self: DeviceMesh, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:
            learn_mesh(self)
        except Exception:  # noqa: BLE001 - naming groups must never fail a mesh
            pass

    __init__.__wrapped__ = original  # pyright: ignore[reportFunctionMemberAccess] - a function takes any attribute
    mesh_cls.__init__ = __init__
    _mesh_init = (mesh_cls, original)


def unwatch_meshes() -> None:
    global _mesh_init
    if _mesh_init is not None:
        mesh_cls, original = _mesh_init
        mesh_cls.__init__ = original
        _mesh_init = None


def forget() -> None:
    """Drop what is known of process groups and meshes."""
    _cache.clear()
    _dims.clear()
    _instances.clear()
    _p2p.clear()  # (known stays: a run's store may still have to keep an instance its records name)
