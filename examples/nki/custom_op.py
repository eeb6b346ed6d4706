"""An NKI kernel as a torch custom op, in both spellings, inside a compiled graph: one kernel.

    python examples/nki/custom_op.py

``NKIOpRegistry.register`` ties the kernel to an op you define with ``torch.library.custom_op``;
``nki_op`` makes the op (schema, fake, autograd) from the kernel in one step. Compiled with nkipy,
the op becomes a custom call inside the kernel around it (the kernel file shows it); run eagerly,
the kernel runs on nkipy-ops-nki's NumPy interpreter.
"""

from __future__ import annotations

import tempfile
import warnings

import torch

import nkipy_core
import nkipy_ops_nki.nki.language as nl
from nkipy_core import init_nkipy_backend
from nkipy_ops_nki import NKIOpRegistry, nki_op


@NKIOpRegistry.register("mylib::add_custom_op")
def nki_tensor_add_kernel(a_input, b_input):
    """One 128 x 512 tile: load both inputs, add, store."""
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(128)[:, None]
    iy = nl.arange(512)[None, :]
    nl.store(c_output[ix, iy], value=nl.load(a_input[ix, iy]) + nl.load(b_input[ix, iy]))
    return c_output


@torch.library.custom_op("mylib::add_custom_op", mutates_args=())
def nki_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return nki_tensor_add_kernel(a, b)


@nki_add.register_fake
def _(a, b):
    return torch.empty_like(a)


def _scale_backward(ctx, grad):
    return grad * ctx.alpha, None


def _scale_setup(ctx, inputs, output):
    ctx.alpha = inputs[1]


@nki_op("mylib::scale", backward=_scale_backward, setup_context=_scale_setup)
def scale_kernel(x, alpha=1.0):
    """``alpha * x`` for a [128, n] tensor, n <= 512."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x)
    nl.store(out, value=nl.multiply(tile, alpha))
    return out


def model(a, b):
    c = torch.ops.mylib.add_custom_op(a, b)  # the NKI kernel
    return torch.ops.mylib.scale(a * b * c, 0.5)


def main() -> None:
    init_nkipy_backend(runtime="cpu", nkipy_cache=tempfile.mkdtemp(prefix="nkipy-nki-"))
    torch.manual_seed(0)
    a, b = torch.randn(128, 512), torch.randn(128, 512)
    expected = 0.5 * (a * b * (a + b))
    print("eager op matches torch:", torch.allclose(nki_add(a, b), a + b))

    compiled = torch.compile(model, backend="nkipy", fullgraph=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = compiled(a, b)
    fallbacks = [w for w in caught if issubclass(w.category, nkipy_core.FallbackWarning)]
    print("compiled matches torch:", torch.allclose(out, expected, atol=1e-5))
    print(f"kernels {nkipy_core.cache_stats['lowered_kernels']}; ops on CPU {len(fallbacks)}")

    x = torch.randn(128, 64, requires_grad=True)
    torch.ops.mylib.scale(x, 3.0).sum().backward()
    print("autograd through nki_op:", torch.equal(x.grad, torch.full_like(x, 3.0)))


if __name__ == "__main__":
    main()
