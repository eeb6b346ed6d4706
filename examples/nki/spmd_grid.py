"""An SPMD kernel over a launch grid, and the same grid sharded over two NeuronCores with ``nl.nc(2)``.

    python examples/nki/spmd_grid.py

Each program of the grid adds one 128 x 512 tile, at the offsets its ``nl.program_id`` gives. The
kernel is launched as ``kernel[gx, gy](...)`` from a custom op's body; compiled, the launch grid
travels with the custom call. Here the programs run one after another on the interpreter.
"""

from __future__ import annotations

import tempfile

import torch

import nkipy_core
import nkipy_ops_nki.nki.language as nl
from nkipy_core import init_nkipy_backend
from nkipy_ops_nki import NKIOpRegistry


@NKIOpRegistry.register("mylib::tiled_add")
def tiled_add_kernel(a_input, b_input, c_output):
    """Tutorial style: the output buffer is an argument; this program writes its tile of it."""
    offset_x = nl.program_id(0) * 128
    offset_y = nl.program_id(1) * 512
    ix = offset_x + nl.arange(128)[:, None]
    iy = offset_y + nl.arange(512)[None, :]
    nl.store(c_output[ix, iy], value=nl.load(a_input[ix, iy]) + nl.load(b_input[ix, iy]))


@torch.library.custom_op("mylib::tiled_add", mutates_args=())
def tiled_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    c = torch.zeros_like(a)
    tiled_add_kernel[a.shape[0] // 128, a.shape[1] // 512](a, b, c)
    return c


@tiled_add.register_fake
def _(a, b):
    return torch.empty_like(a)


NKIOpRegistry.register("mylib::tiled_add_nc2")(tiled_add_kernel)  # one kernel, two ops


@torch.library.custom_op("mylib::tiled_add_nc2", mutates_args=())
def tiled_add_nc2(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    c = torch.zeros_like(a)
    tiled_add_kernel[nl.spmd_dim(a.shape[0] // (128 * 2), nl.nc(2)), a.shape[1] // 512](a, b, c)
    return c


@tiled_add_nc2.register_fake
def _(a, b):
    return torch.empty_like(a)


def main() -> None:
    init_nkipy_backend(runtime="cpu", nkipy_cache=tempfile.mkdtemp(prefix="nkipy-nki-"))
    torch.manual_seed(0)
    a, b = torch.randn(256, 1024), torch.randn(256, 1024)
    for op in (torch.ops.mylib.tiled_add, torch.ops.mylib.tiled_add_nc2):
        out = torch.compile(lambda a, b: op(a, b) * 2, backend="nkipy", fullgraph=True)(a, b)
        print(f"{op._qualified_op_name}: grid matches torch: {torch.equal(out, (a + b) * 2)}")
    print(f"kernels {nkipy_core.cache_stats['lowered_kernels']}")


if __name__ == "__main__":
    main()
