"""DTensor's random ops over a ``nkipy`` DeviceMesh draw from the device generator (the mesh needs
the ``nkipy`` process group, hence this suite rather than tests/device)."""

import tempfile

import torch
import torch.distributed as dist

nkipy = torch.nkipy


def seed_and_offset(state: torch.Tensor) -> tuple[int, int]:
    """What DTensor's ``_PhiloxState`` reads from a CUDA-like state."""
    return int(state[:8].view(torch.uint64)), int(state[8:].view(torch.int64))


def test_dtensor_random_ops_on_a_device_mesh(tmp_path):
    """A one-rank mesh: DTensor makes its ``OffsetBasedRNGTracker`` over the device's generator,
    runs the op at the shard's offset and leaves the offset past the whole tensor."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, rand

    dist.init_process_group(
        "nkipy", init_method=f"file://{tempfile.mktemp(dir=tmp_path)}", rank=0, world_size=1
    )
    try:
        mesh = init_device_mesh("nkipy", (1,))
        torch.manual_seed(4)
        sharded = rand((8, 4), device_mesh=mesh, placements=[Shard(0)])
        assert seed_and_offset(nkipy.get_rng_state()) == (4, 32)  # DTensor's: past 32 values
        torch.manual_seed(4)
        assert torch.equal(sharded.to_local().cpu(), torch.rand(8, 4, device="nkipy").cpu())
    finally:
        dist.destroy_process_group()
