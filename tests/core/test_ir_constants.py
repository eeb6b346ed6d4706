"""Constants keep their shape: 0-d and zero-size literals (found by the conformance harness)."""

import numpy as np
import torch

from nkipy_core import knp
from nkipy_core.ir import DType, KernelBuilder, TensorType, codegen
from nkipy_core.ir.graph import ConstantData
from nkipy_core.ir.passes import simplify


def test_zero_dim_constant_stays_zero_dim():
    assert ConstantData.from_array(np.asarray(2.5), DType.f32).shape == ()
    builder = KernelBuilder("k")
    x = builder.param(TensorType((), DType.f32))
    with builder.building("test"):
        out = x + np.asarray(1.0, dtype=np.float32)  # a 0-d NumPy operand becomes a constant
    assert str(out.value.type) == "f32[]"


def test_zero_size_constant_is_emitted_with_its_shape():
    builder = KernelBuilder("k")
    x = builder.param(TensorType((1, 0, 3), DType.f32))
    with builder.building("test"):
        out = knp.subtract(knp.full((1, 0, 3), 1.0), x)  # folds to an empty constant
    kernel = simplify(builder.finish((out,)))
    result = codegen.load(codegen.generate(kernel))(np.zeros((1, 0, 3), np.float32))[0]
    assert result.shape == (1, 0, 3)


def test_compiled_scalar_and_empty_results_have_torch_shapes():
    f = torch.compile(lambda x: (x.sum() / 2, torch.acos(x.new_empty(1, 0, 3))), backend="nkipy")
    scalar, empty = f(torch.ones(3))
    assert scalar.shape == () and empty.shape == (1, 0, 3)
