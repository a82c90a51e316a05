"""Functional collectives (telemetry/hooks/functional.py), as DTensor calls them, in a 1-rank gloo group in
this process: timed from issue to wait_tensor, named by their mesh dimension, counted once, and left
alone while Dynamo traces."""

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh

import telemetry
from telemetry.hooks import functional
from telemetry.store import read_run
from tests.helpers.servers import free_port


@pytest.fixture
def mesh():
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    yield init_device_mesh("cpu", (1,), mesh_dim_names=("tp",))
    telemetry.shutdown()
    dist.destroy_process_group()


def test_a_functional_all_reduce_is_timed_to_its_wait_and_named_by_its_dimension(mesh, run_dir):
    telemetry.init(run_dir=run_dir, job="fc", sinks=["store"], online=False)
    x = torch.ones(256, 64)
    for _ in range(3):
        with telemetry.step():
            with telemetry.phase("forward"):
                y = funcol.all_reduce(x, "sum", (mesh, 0))  # an AsyncCollectiveTensor: not waited yet
                z = (y * 2).sum()  # first use: wait_tensor
            assert float(z) == 2 * 256 * 64
    telemetry.shutdown()
    steps = read_run(run_dir).steps
    assert len(steps) == 3
    for s in steps:
        assert s["ops"]["all_reduce"][0] == 1  # one call, counted once
        assert s["ops"]["all_reduce"][3] == 256 * 64 * 4  # its bytes
        blocked, nbytes = s["comm_groups"]["tp"]
        assert blocked > 0 and nbytes == 256 * 64 * 4
        assert s["phase_comm"]["forward"] > 0


def test_an_unwaited_result_is_forgotten_and_a_compiled_call_passes_through(mesh, run_dir, monkeypatch):
    telemetry.init(run_dir=run_dir, job="fc2", sinks=["store"], online=False)
    x = torch.ones(16)
    with telemetry.step():
        dropped = funcol.all_reduce(x, "sum", (mesh, 0))  # not waited in its step
    assert len(functional._in_flight) == 1
    monkeypatch.setattr(functional, "_tracing", lambda: True)  # as while Dynamo traces
    with telemetry.step():
        funcol.all_reduce(x, "sum", (mesh, 0)).wait()
    assert len(functional._in_flight) == 1  # the traced call left nothing behind
    telemetry.shutdown()
    assert [s.get("comm_groups") for s in read_run(run_dir).steps] == [None, None]  # never waited: not timed
    dropped.wait()  # (torch says so at exit otherwise)
