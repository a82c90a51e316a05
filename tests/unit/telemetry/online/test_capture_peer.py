"""The peer of a capture (telemetry/online/capture.py): on the flagged rank's node when the ranks per
node are known and another rank is there, else the median rank of the whole job."""

import numpy as np

from telemetry.online.capture import Captures
from telemetry.online.wire import FIXED, Block


def block(compute):
    assert len(FIXED) == 7
    return Block.of({r: np.array([1, 10, 0.1, c, 0.0, 0.0, 0.0]) for r, c in compute.items()})


def captures(world, local_world):
    return Captures(None, 0, world, 10, 2, None, "/nonexistent", local_world=local_world)


def test_the_peer_is_on_the_flagged_ranks_node():
    # 2 nodes x 4 ranks; rank 5 flagged; node 1 holds 4, 6, 7: the median of their compute is rank 6
    b = block({0: 0.10, 1: 0.11, 2: 0.12, 3: 0.13, 4: 0.20, 5: 0.50, 6: 0.21, 7: 0.22})
    assert captures(8, 4)._peer([5], b) == (6, "same node")


def test_without_node_layout_or_anyone_else_on_the_node_the_median_rank():
    b = block({0: 0.10, 1: 0.11, 2: 0.12, 3: 0.13, 4: 0.20, 5: 0.50, 6: 0.21, 7: 0.22})
    assert captures(8, 8)._peer([5], b) == (3, "median rank")  # one node: no layout to use
    assert captures(8, 0)._peer([5], b) == (3, "median rank")
    # one rank per node: nobody shares the flagged rank's node
    b2 = block({0: 0.1, 1: 0.5, 2: 0.12, 3: 0.11})
    assert captures(4, 1)._peer([1], b2) == (3, "median rank")
    assert captures(4, 2)._peer([1], b2) == (0, "same node")


def test_before_any_block_the_next_rank():
    assert captures(4, 2)._peer([0], None) == (1, "next rank")
