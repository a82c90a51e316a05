"""The collective hook (telemetry/hooks/collectives.py) in this process: bus-bandwidth factors,
instrumentation on and off, and a process-group cache that never mistakes a new group for a
destroyed one. Real gloo ranks: tests/integration/test_collectives_gloo.py."""

import gc
import weakref

import pytest

from telemetry.hooks import collectives, groups


def test_busbw_factors_follow_nccl_tests():
    n = 4
    factors = {op: spec[1](n) for op, spec in collectives._SPECS.items()}
    assert factors["all_reduce"] == pytest.approx(2 * (n - 1) / n)
    for op in (
        "all_gather",
        "all_gather_into_tensor",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "all_to_all",
        "all_to_all_single",
    ):
        assert factors[op] == pytest.approx((n - 1) / n), op
    for op in ("broadcast", "reduce", "send", "recv"):
        assert factors[op] == 1.0


def test_instrumentation_is_idempotent_and_reversible():
    import torch.distributed as dist

    original = dist.all_reduce
    assert collectives.instrument_collectives()
    wrapped = dist.all_reduce
    assert wrapped is not original and wrapped.__telemetry_original__ is original
    collectives.instrument_collectives()
    assert dist.all_reduce is wrapped  # not wrapped twice
    collectives.uninstrument_collectives()
    assert dist.all_reduce is original and not collectives.is_instrumented()


class Group:
    def __init__(self, size, name, desc="undefined", ranks=None):
        self.size, self.group_name, self.group_desc = size, name, desc
        self.ranks = list(range(size)) if ranks is None else ranks


class FakeDist:
    class group:
        WORLD = None

    @staticmethod
    def get_world_size(group=None):
        return (group or FakeDist.group.WORLD).size

    @staticmethod
    def get_process_group_ranks(group):
        return group.ranks


def test_a_group_at_a_destroyed_groups_address_is_read_afresh():
    """CPython hands a freed group's address to a later object: the cache, keyed by address, must not
    give the new group the old one's size and label. The old group's entry is planted at the new
    group's address (as the allocator would leave it), dead and alive."""
    collectives.forget_groups()
    FakeDist.group.WORLD = Group(8, "0")
    old, new = Group(8, "old", "mesh_dp"), Group(2, "new", "mesh_tp")
    groups._cache[id(new)] = (weakref.ref(old), (8, "dp"))  # the old group still alive
    assert collectives._group_info(FakeDist, new) == (2, "tp")
    groups._cache[id(new)] = (weakref.ref(old), (8, "dp"))
    del old
    gc.collect()  # ... and destroyed: its weak reference is dead
    assert collectives._group_info(FakeDist, new) == (2, "tp")
    assert collectives._group_info(FakeDist, new) == (2, "tp")  # now cached as itself
    FakeDist.group.WORLD = None


def test_the_default_group_is_read_again_after_a_new_init():
    collectives.forget_groups()
    FakeDist.group.WORLD = Group(4, "0")
    assert collectives._group_info(FakeDist, None) == (4, "world")
    FakeDist.group.WORLD = Group(16, "1")  # destroy_process_group, then init_process_group again
    assert collectives._group_info(FakeDist, None) == (16, "world")
    FakeDist.group.WORLD = None
    assert collectives._group_info(FakeDist, None)[1] == "world"  # not initialized: not cached


def test_each_group_is_labelled_by_its_mesh_dimension_else_world_else_its_ranks():
    collectives.forget_groups()
    FakeDist.group.WORLD = Group(8, "0", "default_pg")
    assert groups.group_info(FakeDist, Group(4, "5", "mesh_dp_shard", [0, 2, 4, 6]))[1] == "dp_shard"
    assert groups.group_info(FakeDist, Group(8, "6", "undefined"))[1] == "world"  # every rank
    odd = groups.group_info(FakeDist, Group(4, "7", "undefined", [1, 3, 5, 7]))[1]
    assert odd == groups.group_info(FakeDist, Group(4, "8", "mesh_dim_0", [1, 3, 5, 7]))[1]  # unnamed
    assert (
        odd.startswith("g") and len(odd) == 9 and odd != groups.group_info(FakeDist, Group(4, "9", "", [0, 1, 2, 3]))[1]
    )

    class Mesh:  # a 1-D mesh named tp over the whole job: its group is the default group
        mesh_dim_names = ("tp",)
        _dim_group_names = ["0"]

        def size(self, dim):
            return 8

    assert groups.mesh_dim_info(Mesh(), 0) == (8, "tp")
    assert groups.group_info(FakeDist, None) == (8, "tp")  # learned: the default group is tp's
    collectives.forget_groups()
    FakeDist.group.WORLD = None
