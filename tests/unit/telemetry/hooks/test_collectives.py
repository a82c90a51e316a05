"""The collective hook (telemetry/hooks/collectives.py) in this process: bus-bandwidth factors,
instrumentation on and off, and a process-group cache that never mistakes a new group for a
destroyed one. Real gloo ranks: tests/integration/test_collectives_gloo.py."""

import gc
import weakref

import pytest

from telemetry.hooks import collectives


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
    def __init__(self, size, name):
        self.size, self.group_name = size, name


class FakeDist:
    class group:
        WORLD = None

    @staticmethod
    def get_world_size(group=None):
        return (group or FakeDist.group.WORLD).size


def test_a_group_at_a_destroyed_groups_address_is_read_afresh():
    """CPython hands a freed group's address to a later object: the cache, keyed by address, must not
    give the new group the old one's size and name. The old group's entry is planted at the new
    group's address (as the allocator would leave it), dead and alive."""
    collectives.forget_groups()
    old, new = Group(8, "old"), Group(2, "new")
    collectives._group_cache[id(new)] = (weakref.ref(old), (8, "old"))  # the old group still alive
    assert collectives._group_info(FakeDist, new) == (2, "new")
    collectives._group_cache[id(new)] = (weakref.ref(old), (8, "old"))
    del old
    gc.collect()  # ... and destroyed: its weak reference is dead
    assert collectives._group_info(FakeDist, new) == (2, "new")
    assert collectives._group_info(FakeDist, new) == (2, "new")  # now cached as itself


def test_the_default_group_is_read_again_after_a_new_init():
    collectives.forget_groups()
    FakeDist.group.WORLD = Group(4, "0")
    assert collectives._group_info(FakeDist, None) == (4, "default")
    FakeDist.group.WORLD = Group(16, "1")  # destroy_process_group, then init_process_group again
    assert collectives._group_info(FakeDist, None) == (16, "default")
    FakeDist.group.WORLD = None
    assert collectives._group_info(FakeDist, None)[1] == "default"  # not initialized: not cached
