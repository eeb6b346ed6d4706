"""Eager ATen ops on nkipy tensors: single-op kernels from the packs, cached by op and signature;
ops no pack lowers run on CPU with one warning; autograd and optimizers match CPU."""

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from fresh_python import python

import nkipy_core
from nkipy_core import FallbackWarning, cache_stats, init_nkipy_backend

OPS = {
    "add": lambda a, b: a + b,
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=0.5),
    "mul_scalar": lambda a, b: a * 3,
    "div": lambda a, b: a / (b.abs() + 1),
    "matmul_transposed": lambda a, b: a @ b.t(),
    "relu": lambda a, b: torch.relu(a),
    "silu": lambda a, b: F.silu(a),
    "exp_log": lambda a, b: torch.log(torch.exp(a) + 1),
    "softmax": lambda a, b: torch.softmax(a, -1),
    "log_softmax": lambda a, b: F.log_softmax(a, 0),
    "layer_norm": lambda a, b: F.layer_norm(a, (a.shape[-1],)),
    "sum_dim": lambda a, b: a.sum(-1),
    "mean_keepdim": lambda a, b: a.mean(0, keepdim=True),
    "amax": lambda a, b: a.amax(-1),
    "max_dim": lambda a, b: a.max(-1),
    "argmax": lambda a, b: a.argmax(),
    "where": lambda a, b: torch.where(a > 0, a, b),
    "cat": lambda a, b: torch.cat([a, b], 0),
    "stack": lambda a, b: torch.stack([a, b]),
    "index_select": lambda a, b: a[torch.tensor([2, 0]).to(a.device)],
    "slice_contiguous": lambda a, b: a[:, 1:3].contiguous(),
    "permute_reshape": lambda a, b: a.t().reshape(-1),
    "clamp": lambda a, b: a.clamp(-0.5, 0.5),
    "cumsum": lambda a, b: a.cumsum(0),
    "comparison": lambda a, b: (a > b) & (a < 1),
    "to_bf16": lambda a, b: a.to(torch.bfloat16) * 2,
    "linear": lambda a, b: F.linear(a, b, torch.ones(4).to(a.device)),
    "inplace_chain": lambda a, b: a.clone().mul_(2).add_(b).sigmoid_(),
    "out_variant": lambda a, b: torch.add(a, b, out=torch.empty(0, device=a.device)),
    # composites that hand a wrapped Python number to a Tensor overload (xlogy.OutTensor)
    "xlogy_scalar_other": lambda a, b: torch.xlogy(a.abs(), 1.1),
    "xlogy_scalar_self": lambda a, b: torch.xlogy(2, a.abs()),
    "xlogy_int_tensor": lambda a, b: torch.xlogy(torch.arange(16).reshape(4, 4).to(a.device), 1.5),
}


@pytest.mark.parametrize("name", OPS)
def test_eager_op_matches_cpu_without_fallback(name):
    torch.manual_seed(0)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    expected = OPS[name](a, b)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        result = OPS[name](a.to("nkipy"), b.to("nkipy"))
    for got, want in zip(*(r if isinstance(r, tuple) else (r,) for r in (result, expected))):
        assert got.device.type == "nkipy" and got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def test_an_op_without_tensor_arguments_may_be_the_devices_first_use():
    """The dispatcher sends such a factory straight to the device's fallback, before anything
    was allocated: the device's first use, which hands the ATen kernels the eager ops, happens
    then, and the op runs."""
    result = python(
        "import torch, nkipy_core\nnkipy_core.register_device()\n"
        "print(torch.tril_indices(3, 3, device='nkipy').cpu().tolist())\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[[0, 1, 1, 2, 2, 2], [0, 0, 1, 0, 1, 2]]"


def test_single_op_kernels_are_cached_by_op_shape_and_dtype(per_op):
    a, b = torch.randn(3, 5).to("nkipy"), torch.randn(3, 5).to("nkipy")
    torch.add(a, b)
    compiled = cache_stats["compiled_kernels"]
    for _ in range(3):
        torch.add(a, b)
    assert cache_stats["compiled_kernels"] == compiled  # same op, shapes, dtypes: no new kernel
    torch.add(a[:2], b[:2])
    assert cache_stats["compiled_kernels"] == compiled + 1  # a new shape is a new kernel
    torch.add(a.double(), b.double())
    assert cache_stats["compiled_kernels"] >= compiled + 2  # a new dtype too


def test_eager_kernels_go_through_the_runtime_without_host_transfers():
    a = torch.randn(8, 8).to("nkipy")
    torch.relu(a @ a)
    before = torch.nkipy.transfer_stats()
    out = torch.relu(a @ a).sum(0)
    assert torch.nkipy.transfer_stats() == before
    assert out.device.type == "nkipy"


def test_an_op_no_pack_lowers_runs_on_cpu_with_one_warning():
    x = torch.randn(5, 3)
    d = x.to("nkipy")
    with pytest.warns(
        FallbackWarning,
        match=r"aten::igamma\.default runs on CPU: torch's series .* \(nkipy-ops-base\)",
    ):
        out = torch.special.gammainc(d.abs() + 1, d.abs())
    assert out.device.type == "nkipy"
    torch.testing.assert_close(out.cpu(), torch.special.gammainc(x.abs() + 1, x.abs()))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        torch.special.gammainc(d.abs() + 2, d.abs())  # the warning is given once


def test_async_asserts_check_on_the_host_without_a_warning():
    positions = torch.arange(6).to("nkipy")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        torch._assert_async((positions < 6).all(), "positions beyond the cache")
        torch._assert_async((positions >= 0).all())
    with pytest.raises(RuntimeError, match="positions beyond the cache"):
        torch._assert_async((positions < 5).all(), "positions beyond the cache")


def test_in_place_op_without_lowering_writes_back_to_the_device():
    x, y = torch.rand(4) + 0.5, torch.rand(4)
    d = x.to("nkipy")
    with pytest.warns(FallbackWarning, match="igamma"):
        d.igamma_(y.to("nkipy"))
    torch.testing.assert_close(d.cpu(), torch.igamma(x, y))


def test_strict_mode_raises_for_an_op_no_pack_lowers():
    init_nkipy_backend(strict=True)
    d = torch.randn(3).to("nkipy")
    with pytest.raises(
        nkipy_core.UnsupportedOpsError, match=r"aten::igamma\.default .*eager on nkipy"
    ):
        torch.special.gammainc(d.abs() + 1, d.abs())
    torch.relu(d)  # lowered ops still run


def test_in_place_result_type_follows_torch_casting_rules():
    d = torch.arange(3).to("nkipy")
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        d.add_(0.5)


def test_autograd_on_device_tensors():
    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 2, requires_grad=True)
    xd = x.detach().to("nkipy").requires_grad_(True)
    wd = w.detach().to("nkipy").requires_grad_(True)
    (torch.tanh(x @ w) ** 2).sum().backward()
    (torch.tanh(xd @ wd) ** 2).sum().backward()
    assert xd.grad.device.type == "nkipy"
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
    torch.testing.assert_close(wd.grad.cpu(), w.grad)


def test_grouped_mm_on_device_tensors_matches_cpu_forward_and_backward():
    """TorchTitan's MoE call, the offsets on the device with the rest: one kernel per call whose
    offsets are an input, the backward's 2-D x 2-D weight gradient included."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(16, 8, generator=g), torch.randn(3, 16, 8, generator=g)
    offs = torch.tensor([5, 5, 16], dtype=torch.int32)
    grad = torch.randn(16, 16, generator=g).bfloat16()
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for device in ("cpu", "nkipy"):
            xd, wd = (t.clone().to(device).requires_grad_() for t in (x, w))
            out = torch._grouped_mm(
                xd.bfloat16(),
                wd.bfloat16().transpose(-2, -1),
                offs=offs.to(device),
                out_dtype=torch.bfloat16,
            )
            out.backward(grad.to(device))
            results.append([out.detach().cpu(), xd.grad.cpu(), wd.grad.cpu()])
    for got, want in zip(results[1], results[0]):
        torch.testing.assert_close(got, want)


def test_arguments_torch_only_refuses_in_its_shape_function_run_on_cpu():
    """``_grouped_mm``'s meta function wants bf16; its CPU kernel takes f32 too: that call runs
    on CPU with a warning. A call CPU refuses as well raises torch's error, and no warning."""
    x, w = torch.randn(16, 8), torch.randn(3, 8, 16)
    offs = torch.tensor([5, 5, 16], dtype=torch.int32)
    with pytest.warns(
        FallbackWarning,
        match=r"aten::_grouped_mm\.default runs on CPU: torch's shape function refuses",
    ):
        out = torch._grouped_mm(x.to("nkipy"), w.to("nkipy"), offs=offs.to("nkipy"))
    torch.testing.assert_close(out.cpu(), torch._grouped_mm(x, w, offs=offs))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        with pytest.raises(RuntimeError, match="cannot be multiplied"):
            torch.randn(3, 4).to("nkipy") @ torch.randn(3, 4).to("nkipy")


def _train(model, x, y, optimizer_cls, steps=4):
    optimizer = optimizer_cls(model.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().cpu())
    return losses


@pytest.mark.parametrize(
    "optimizer_cls", [torch.optim.SGD, torch.optim.AdamW], ids=lambda c: c.__name__
)
def test_training_loop_on_the_device_matches_cpu(optimizer_cls):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    x, y = torch.randn(10, 6), torch.randn(10, 3)
    cpu_model, device_model = copy.deepcopy(model), copy.deepcopy(model).to("nkipy")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        device_losses = _train(device_model, x.to("nkipy"), y.to("nkipy"), optimizer_cls)
    cpu_losses = _train(cpu_model, x, y, optimizer_cls)
    torch.testing.assert_close(torch.stack(device_losses), torch.stack(cpu_losses))
    for p, q in zip(device_model.parameters(), cpu_model.parameters()):
        assert p.device.type == "nkipy"
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)
    assert device_losses[-1] < device_losses[0]


def test_python_floats_are_kernel_inputs_not_part_of_the_key(per_op):
    a, b, c = torch.randn(4, 4), torch.randn(4, 4), torch.rand(4, 4) + 1
    da, db, dc = a.to("nkipy"), b.to("nkipy"), c.to("nkipy")
    torch.addcdiv(da, db, dc, value=0.5)
    compiled = cache_stats["compiled_kernels"]
    for value in (-0.25, 1e-3, 7.0):  # an optimizer's step size changes every step
        out = torch.addcdiv(da, db, dc, value=value)
        torch.testing.assert_close(out.cpu(), torch.addcdiv(a, b, c, value=value))
    assert cache_stats["compiled_kernels"] == compiled


HALF_SCALAR_OPS = {
    "add": lambda x: x + 0.1,
    "mul": lambda x: x * 0.1,
    "alpha": lambda x: torch.add(x, x, alpha=1.1),
    "pow-scalar-base": lambda x: 1.1 ** (x * 6),
    "remainder": lambda x: torch.remainder(x, 1 / 3),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name", HALF_SCALAR_OPS)
def test_python_floats_with_half_tensors_match_cpu_bit_for_bit(name, dtype):
    """The floats arrive as f64 kernel inputs; they must round to the half dtype (through f32,
    as torch's casts do) exactly where CPU eager rounds them."""
    x = (torch.rand(256, dtype=torch.float64) * 8 - 4).to(dtype)
    assert torch.equal(HALF_SCALAR_OPS[name](x.to("nkipy")).cpu(), HALF_SCALAR_OPS[name](x))


def test_rounded_floats_stay_kernel_inputs(per_op):
    """Rounding a float to f16 is part of the kernel, so new values reuse it."""
    x = (torch.rand(64, dtype=torch.float64) * 8 - 4).to(torch.float16)
    d = x.to("nkipy")
    torch.add(d, 0.3, alpha=0.5)
    compiled = cache_stats["compiled_kernels"]
    for value, alpha in ((0.1, 1.1), (1 / 3, -0.7), (1 + 2**-11 + 2**-40, 1e-3)):
        assert torch.equal(torch.add(d, value, alpha=alpha).cpu(), torch.add(x, value, alpha=alpha))
    assert cache_stats["compiled_kernels"] == compiled


def test_a_float_that_decides_the_shape_stays_in_the_key(per_op):
    x = torch.randn(1, 2, 4)
    for scale in (2.0, 3.0):
        out = F.interpolate(x.to("nkipy"), scale_factor=scale)
        torch.testing.assert_close(out.cpu(), F.interpolate(x, scale_factor=scale))


def test_index_tensors_may_stay_on_cpu():
    x = torch.arange(12.0).reshape(3, 4)
    d = x.to("nkipy")
    rows = torch.tensor([2, 0])
    assert torch.equal(d[rows].cpu(), x[rows])
    d[torch.tensor([1])] = 5.0
    x[torch.tensor([1])] = 5.0
    assert torch.equal(d.cpu(), x)


# -- repeated calls: the fast dispatch path (eager._Kernels.fast) --------------------------------


def test_repeated_out_of_place_calls_match_cpu_for_each_signature():
    torch.manual_seed(0)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    da, db = a.to("nkipy"), b.to("nkipy")
    for _ in range(3):  # the first call takes the full path, the others the fast one
        torch.testing.assert_close(torch.add(da, db).cpu(), a + b)
        torch.testing.assert_close(torch.add(da[:2], db[:2]).cpu(), a[:2] + b[:2])  # another shape
        torch.testing.assert_close(
            torch.add(da.double(), db.double()).cpu(), a.double() + b.double()
        )
        torch.testing.assert_close(torch.add(da.t(), db).cpu(), a.t() + b)  # a strided input


def test_repeated_calls_see_a_tensor_whose_layout_changed_in_place():
    """A storage hands out the last ``DeviceArray`` made of it again (``memory.array``) only while
    the tensor's dtype, sizes, strides and offset are the ones it was made for."""
    torch.manual_seed(0)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    da, db = a.clone().to("nkipy"), b.to("nkipy")
    for _ in range(2):
        torch.testing.assert_close(torch.add(da, db).cpu(), a + b)
        da.t_(), a.t_()  # new strides, same storage
        torch.testing.assert_close(torch.add(da, db).cpu(), a + b)
        da.t_(), a.t_()
    torch.testing.assert_close(torch.add(da, da.t()).cpu(), a + a.t())  # two layouts in one call
    torch.testing.assert_close(torch.add(da[1:], db[:3]).cpu(), a[1:] + b[:3])  # an offset
    as_int = torch.bitwise_xor(
        da.view(torch.int32), db.view(torch.int32)
    )  # another dtype, same layout
    assert torch.equal(as_int.cpu(), torch.bitwise_xor(a.view(torch.int32), b.view(torch.int32)))
    da.set_(db.untyped_storage(), 0, (4, 4), (4, 1))  # another storage
    torch.testing.assert_close(torch.add(da, db).cpu(), b + b)


def test_repeated_calls_with_a_cpu_scalar_tensor_match_cpu():
    """All-device calls go to the kernel's ``device_call``; a 0-dim CPU tensor among the inputs
    (which torch allows) keeps them on the general path, staged."""
    a = torch.randn(3, 3)
    da = a.to("nkipy")
    for i in range(3):
        scalar = torch.tensor(float(i))
        torch.testing.assert_close(torch.mul(da, scalar).cpu(), a * i)
        torch.testing.assert_close(torch.mul(da, da).cpu(), a * a)


def test_repeated_mixed_device_calls_keep_raising():
    d, c = torch.randn(3, 3).to("nkipy"), torch.randn(3, 3)
    torch.add(d, d)
    for _ in range(2):
        with pytest.raises(nkipy_core.DeviceError, match="got tensors on nkipy and on cpu"):
            torch.add(d, c)


def test_repeated_in_place_ops_write_their_target_and_return_it():
    torch.manual_seed(0)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    da, db = a.clone().to("nkipy"), b.to("nkipy")
    view = da.view(16)  # another view of the target's storage sees every write
    for _ in range(3):
        assert da.add_(db) is da
        a.add_(b)
        torch.testing.assert_close(da.cpu(), a)
        torch.testing.assert_close(view.cpu(), a.view(16))
        assert da.mul_(da) is da  # the target is an input too
        a.mul_(a)
        torch.testing.assert_close(da.cpu(), a)
    assert db.cpu().equal(b)


def test_repeated_in_place_ops_on_strided_views_write_through():
    torch.manual_seed(0)
    base, other = torch.randn(6, 4), torch.randn(4, 2)
    dbase, dother = base.clone().to("nkipy"), other.to("nkipy")
    for _ in range(3):
        target = dbase[1:5, ::2].t()  # offset and non-contiguous
        assert target.add_(dother.t()) is target
        base[1:5, ::2].t().add_(other.t())
        torch.testing.assert_close(dbase.cpu(), base)


def test_repeated_out_variant_writes_the_out_tensor():
    torch.manual_seed(0)
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    da, db = a.to("nkipy"), b.to("nkipy")
    out = torch.empty(3, 4, device="nkipy")
    for i in range(3):
        result = torch.add(da, db * i, out=out)
        assert result is out
        torch.testing.assert_close(out.cpu(), a + b * i)


def test_repeated_in_place_ops_with_a_wider_operand_cast_like_torch():
    a, b = torch.randn(5), torch.randn(5, dtype=torch.float64)
    da, db = a.clone().to("nkipy"), b.to("nkipy")
    for _ in range(3):  # the functional result is f64: it is cast into the f32 target
        da.add_(db)
        a.add_(b)
        assert da.dtype == torch.float32
        torch.testing.assert_close(da.cpu(), a)


def test_repeated_in_place_ops_allocate_no_buffer_for_the_result(per_op):
    """A runtime with ``run_into`` (``cpu``) writes an in-place result into its target; one whose
    buffers are immutable (``xla``) needs exactly one result buffer, freed after the copy."""
    from nkipy_core.buffers import memory

    a, b = torch.randn(64, 64).to("nkipy"), torch.randn(64, 64).to("nkipy")
    a.add_(b)
    a.add_(b)
    torch.nkipy.reset_peak_memory_stats()
    before = torch.nkipy.memory_allocated()
    a.add_(b)
    extra = 0 if hasattr(memory.runtime(), "run_into") else a.nbytes
    assert torch.nkipy.max_memory_allocated() == before + extra
    assert torch.nkipy.memory_allocated() == before


def test_repeated_calls_with_int_and_flag_arguments_are_keyed_by_their_values():
    torch.manual_seed(0)
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    da, db = a.to("nkipy"), b.to("nkipy")
    for _ in range(3):
        torch.testing.assert_close(da.sum(-1).cpu(), a.sum(-1))
        torch.testing.assert_close(da.sum(0).cpu(), a.sum(0))
        torch.testing.assert_close(da.sum([0, 1]).cpu(), a.sum([0, 1]))
        torch.testing.assert_close(da.sum(0, keepdim=True).cpu(), a.sum(0, keepdim=True))
        for alpha in (2, 3):
            torch.testing.assert_close(torch.add(da, db, alpha=alpha).cpu(), a + alpha * b)
        torch.testing.assert_close(da.to(torch.float64).cpu(), a.double())


def test_repeated_in_place_ops_with_a_number_for_a_tensor_argument():
    count = torch.tensor(0).to("nkipy")  # what BatchNorm's num_batches_tracked.add_(1) reaches
    for i in range(1, 4):
        assert count.add_(1) is count
        assert count.cpu().item() == i


def test_floats_baked_into_kernels_are_kept_for_a_bounded_number_of_values(monkeypatch, per_op):
    """``interpolate``'s scale factor decides the result's shape, so each value has a kernel of
    its own: a program calling it with ever new values keeps only the most recent ones, and
    counts the rest."""
    from nkipy_core.device import eager

    monkeypatch.setattr(eager, "MAX_FLOAT_VALUES", 2)
    x = torch.randn(1, 3, 7)  # a shape no other test uses: a new signature, bounded at 2 values
    d = x.to("nkipy")
    evictions = cache_stats["eager_float_values_evictions"]

    def check(value):
        out = F.interpolate(d, scale_factor=value)
        torch.testing.assert_close(out.cpu(), F.interpolate(x, scale_factor=value))

    for value in (1.5, 2.5, 3.5):
        check(value)
    compiled = cache_stats["compiled_kernels"]
    check(1.5)  # evicted from memory: back from the disk cache, not compiled again
    assert cache_stats["compiled_kernels"] == compiled
    assert cache_stats["eager_float_values_evictions"] == evictions + 2
    by_value = [
        v for k, v in eager.current_state().entries.items() if isinstance(v, eager._ByValue)
    ]
    assert by_value and all(len(v) <= 2 for v in by_value)
