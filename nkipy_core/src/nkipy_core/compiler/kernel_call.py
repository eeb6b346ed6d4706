"""The call of one compiled kernel: what stands for a fused subgraph in a compiled graph.

``KernelCall`` binds a compiled executable to its runtime and passes it torch tensors: ``nkipy``
tensors as the device arrays they are (through ``memory``, the buffer layer), CPU tensors as host
arrays or staged buffers, or as they are to a runtime that computes with torch (``run_torch``). ``entry`` is what AOTAutograd calls for a compiled graph. It sits below
the device: the device's eager ops run their single-op kernels through it.

Kernels compute on plain arrays; ``Boundary`` says where a call's torch values differ from them.
Kernels know no complex numbers: a complex tensor goes in as its real view (``memory.array``,
``torch_to_numpy``) and a complex result comes back as one, which the call views as complex again
(``torch.view_as_complex``, no copy). A tensor with torch's conjugate or negative bit set is a
view whose buffer holds other values than it reads; such an input is resolved before the call.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np
import torch
import torch.fx

from nkipy_core import _torch
from nkipy_core.buffers import memory
from nkipy_core.compiler.host_views import HostViews, host_arrays
from nkipy_core.errors import ConfigurationError
from nkipy_core.ir.types import numpy_to_torch, torch_to_numpy
from nkipy_core.observe import profiling
from nkipy_core.runtime.base import DeviceArray


@attrs.frozen
class Boundary:
    """Where a kernel's torch values are not its arrays, from its subgraph's example values."""

    #: whether some input is complex (``torch_to_numpy`` gives its real view, ``numpy()`` its
    #: complex one: no remembered NumPy views then)
    complex_inputs: bool = False
    #: per output: whether it is complex (the kernel returns its real view); ``()``: none is
    complex_outputs: tuple[bool, ...] = ()
    #: the inputs with the conjugate or negative bit set: resolved before the call (dynamo
    #: guards the bits, so the inputs at these positions have them at every call)
    resolved_inputs: tuple[int, ...] = ()
    #: per input: the memory order the kernel takes it in (``lower.input_orders``), passed
    #: permuted into it; ``()``: every input as it is
    input_orders: tuple[tuple[int, ...] | None, ...] = ()
    #: pairs ``(k, j)``: the call leaves output ``k`` in input ``j``'s tensor and returns that
    #: tensor for it (``in_place.write_inputs_in_kernels``: the graph's ``copy_`` of the output
    #: into that input, taken into the call)
    writes: tuple[tuple[int, int], ...] = ()


#: a kernel whose torch values are its arrays (real tensors without math bits)
PLAIN = Boundary()


def inverse_permutation(order: Sequence[int]) -> tuple[int, ...]:
    """The permutation that undoes ``order`` (also ``lower.output_orders``'s)."""
    return tuple(sorted(range(len(order)), key=order.__getitem__))


#: every kernel call alive in the process (weakly held: freeing a call removes it)
_LIVE: weakref.WeakSet[KernelCall] = weakref.WeakSet()


def live_kernels() -> int:
    """How many compiled kernels the process holds in memory: the ``KernelCall`` objects alive
    (eager single-op kernels the device's caches keep, and those of compiled graphs alive),
    each with its loaded executable. The device's caches bound the eager ones (see
    ``docs/caching.md``); a count that keeps growing in a loop means something holds kernels."""
    return len(_LIVE)


class KernelCall(torch.nn.Module):
    """Stands in for a fused subgraph: runs its compiled kernel on the runtime.

    ``nkipy`` tensors are passed as the device arrays they already are; CPU tensors are staged
    to the device and back. Outputs stay on the device when the graph produced them there.

    It is called once per kernel per graph call, so what does not change between calls is
    decided here once (whether outputs stay on the host, whether any needs its dimensions put
    back), and calling it skips ``nn.Module.__call__``: a fused graph's kernels have no hooks,
    and the hook machinery costs more than the rest of a small call (see docs/benchmarks.md).
    Every call of the kernel itself is counted (``stats``): through ``_execute``, or inline on
    the host path, which is the whole call of a small CPU graph, and in ``device_call``, the
    whole call of a repeated eager op.
    """

    def __init__(
        self,
        name: str,
        executable: Any,
        runtime: Any,
        tuple_output: bool,
        entry: str,
        on_device: Sequence[bool],
        orders: Sequence[tuple[int, ...] | None],
        stats: profiling.KernelRecord,
        boundary: Boundary = PLAIN,
    ):
        super().__init__()
        _LIVE.add(self)
        self._orders = tuple(orders)
        #: this kernel's counters (``nkipy_core.kernel_stats()``), shared by its other calls
        self.stats = stats
        self.kernel_name = name
        self.executable = executable
        self.runtime = runtime
        self.tuple_output = tuple_output
        self.entry = entry
        self.on_device = tuple(on_device)
        #: outputs the kernel returns in another dimension order (``output_orders``), put back
        self.inverse_orders = tuple(None if o is None else inverse_permutation(o) for o in orders)
        self._permuted = any(o is not None for o in self.inverse_orders)
        #: a call whose inputs are all CPU tensors runs on host arrays, without staging
        self.run_host: Any = getattr(runtime, "run_host", None)  # set when host_path is
        self.run_host_into: Any = getattr(runtime, "run_host_into", None)
        self.host_path = not any(self.on_device) and self.run_host is not None
        #: a runtime that computes with torch takes CPU tensors as they are (``run_torch``)
        self.run_torch: Any = (
            getattr(runtime, "run_torch", None)
            if not any(self.on_device) and not boundary.complex_inputs
            else None
        )
        self.boundary = boundary
        self.host_views = (
            None if boundary.complex_inputs else HostViews(len(executable.signature.inputs))
        )
        #: per output: whether it is complex, returned by the kernel as its real view
        self.complex_outputs = boundary.complex_outputs or (False,) * len(self.on_device)
        self._viewed_complex = any(self.complex_outputs)
        self._resolved_inputs = boundary.resolved_inputs
        self._input_orders = boundary.input_orders
        self._writes = boundary.writes
        #: output -> the input it is left in (``writes`` as a map)
        self._written = dict(boundary.writes)
        #: the one output, returned as the kernel gives it (no tuple, no permutation, real)
        self.single = (
            not tuple_output and self.inverse_orders == (None,) and not self._viewed_complex
        )

    def twin(self, name: str) -> KernelCall:
        """Another call of this kernel, for a subgraph identical to this one elsewhere in the
        graph (a repeated layer): same executable and counters, its own NumPy views (the tensors
        at its argument positions are other ones: that layer's weights)."""
        return self._another(name, self.boundary)

    def writing(self, writes: tuple[tuple[int, int], ...]) -> KernelCall:
        """This call, leaving output ``k`` in input ``j``'s tensor for each pair of ``writes``
        (see ``Boundary.writes``)."""
        return self._another(self.kernel_name, attrs.evolve(self.boundary, writes=writes))

    def _another(self, name: str, boundary: Boundary) -> KernelCall:
        return KernelCall(
            name,
            self.executable,
            self.runtime,
            self.tuple_output,
            self.entry,
            self.on_device,
            self._orders,
            self.stats,
            boundary,
        )

    def _execute(self, run, inputs: list, *outputs):
        """Run the kernel through ``run`` (``runtime.run``, ``run_into``) with its counters
        (``forward``'s host path has the same lines inline)."""
        start = self.stats.start()
        results = run(self.executable, inputs, *outputs)
        self.stats.stop(start)
        return results

    def forward(self, *args: torch.Tensor):
        if self._writes:
            return self._writing(args)
        return self._compute(args)

    __call__ = forward

    def _prepared(self, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """``args`` as the kernel takes them: math bits resolved, layouts in memory order."""
        if self._resolved_inputs:
            args = self._resolved(args)
        if self._input_orders:
            args = tuple(
                a if order is None else a.permute(order)
                for a, order in zip(args, self._input_orders)
            )
        return args

    def _compute(self, args: tuple[torch.Tensor, ...]):
        args = self._prepared(args)
        if self.run_torch is not None and all(map(_on_cpu, args)):
            stats = self.stats
            start = stats.start()
            tensors = self.run_torch(self.executable, args)
            stats.stop(start)
            return tensors[0] if self.single else self._laid_out(tuple(tensors))
        if self.host_path:
            arrays = self._host_arrays(args)
            if arrays is not None:  # what _execute does, inline: this is the call of a small graph
                stats = self.stats
                start = stats.start()
                results = self.run_host(self.executable, arrays)
                stats.stop(start)
                if self.single:
                    return _to_torch(results[0])
                return self._laid_out(tuple(_to_torch(r) for r in results))
        runtime, inputs, staged = self._device_inputs(args)
        results = self._execute(runtime.run, inputs)
        self._free(runtime, staged)
        if self.single and self.on_device[0]:
            return memory.wrap(results[0])
        return self._laid_out(
            tuple(
                memory.wrap(r) if dev else self._fetch(runtime, r)
                for r, dev in zip(results, self.on_device)
            )
        )

    def _host_arrays(self, args: Sequence[torch.Tensor]) -> list[np.ndarray] | None:
        """NumPy views of ``args``, or ``None`` if some is not a CPU tensor."""
        if self.host_views is not None:
            try:  # CPU tensors NumPy can view; device tensors, bf16 and autograd tensors raise
                return self.host_views.arrays(args)
            except (TypeError, RuntimeError):
                pass
        return host_arrays(args)

    def _writing(self, args: tuple[torch.Tensor, ...]):
        """``forward`` of a call with ``writes``: output ``k`` left in ``args[j]``, and
        ``args[j]`` returned for it. A runtime with ``run_host_into`` is given the inputs'
        own arrays to write into; otherwise the results are copied into them. (Compilation
        gives ``writes`` only to inputs taken as they are: no math bit, no layout change.)"""
        written = self._written
        if self.run_torch is not None and all(map(_on_cpu, args)):
            stats = self.stats
            start = stats.start()
            # each written output is its input, taken as it is: ``args``' own tensor
            tensors = self.run_torch(self.executable, self._prepared(args), self._writes)
            stats.stop(start)
            return self._laid_out(tuple(tensors))
        arrays = None
        if self.host_path and self.run_host_into:
            arrays = self._host_arrays(self._prepared(args))
        if arrays is not None:
            stats = self.stats
            start = stats.start()
            results = self.run_host_into(self.executable, arrays, self._writes)
            stats.stop(start)
            return self._laid_out(
                tuple(
                    args[written[i]] if i in written else _to_torch(r)
                    for i, r in enumerate(results)
                )
            )
        computed = self._compute(args)  # laid out already
        outputs = list(computed) if self.tuple_output else [computed]
        del computed  # each value freed once copied, as the graph's copy_ freed it
        for k, j in written.items():
            args[j].copy_(outputs[k])
            outputs[k] = args[j]
        return tuple(outputs) if self.tuple_output else outputs[0]

    def device_call(self, *args: torch.Tensor) -> torch.Tensor:
        """``forward`` for a call whose inputs are all device tensors and whose one output
        stays on the device, as a repeated eager op's call is (its caller decides that once per
        call signature): no staging, no check of who owns the buffers (``memory``'s runtime,
        which compiled the kernel), no layout to put back."""
        inputs = [memory.array(a) for a in args]
        stats = self.stats
        start = stats.start()
        (result,) = self.runtime.run(self.executable, inputs)
        stats.stop(start)
        return memory.wrap(result)

    def run_into(self, outputs: Sequence[torch.Tensor], *args: torch.Tensor) -> None:
        """Run on ``args`` and write the results into ``outputs``, device tensors of the
        results' shapes and dtypes (an eager in-place op's target), with the runtime's
        ``run_into`` where it has one, else through new buffers copied into place."""
        runtime, inputs, staged = self._device_inputs(args)
        targets = [memory.array(t) for t in outputs]
        run_into = getattr(runtime, "run_into", None)
        if run_into is not None:
            self._execute(run_into, inputs, targets)
        else:
            for result, target in zip(self._execute(runtime.run, inputs), targets):
                runtime.copy(result, target)
                runtime.free(result.buffer)
        self._free(runtime, staged)

    def _resolved(self, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """``args`` with the conjugate and negative bits of ``resolved_inputs`` applied."""
        resolved = list(args)
        for i in self._resolved_inputs:
            resolved[i] = resolved[i].resolve_conj().resolve_neg()
        return tuple(resolved)

    def _device_inputs(self, args: Sequence[torch.Tensor]):
        """The runtime that owns the buffers, the kernel's inputs as its device arrays, and
        those staged from CPU tensors for this call (to free after it)."""
        runtime = self.runtime
        for a in args:
            if not a.is_cpu:
                runtime = memory.runtime()  # who owns the buffers
                if runtime is not self.runtime and runtime.name != self.runtime.name:
                    raise ConfigurationError(
                        f"nkipy tensors live in the {runtime.name!r} runtime's memory but this "
                        f"function was compiled for {self.runtime.name!r}; use one runtime per process"
                    )
                break
        inputs, staged = [], []
        for a, type_ in zip(args, self.executable.signature.inputs):
            if not a.is_cpu:
                inputs.append(memory.array(a))
            else:
                array = DeviceArray.contiguous(runtime.allocate(a.nbytes), type_)
                runtime.to_device(torch_to_numpy(a), array)
                inputs.append(array)
                staged.append(array)
        return runtime, inputs, staged

    @staticmethod
    def _free(runtime, staged: list[DeviceArray]) -> None:
        for array in staged:
            runtime.free(array.buffer)

    def _laid_out(self, outputs: tuple[torch.Tensor, ...]):
        if self._viewed_complex:
            outputs = tuple(
                _as_complex(t) if is_complex else t
                for t, is_complex in zip(outputs, self.complex_outputs)
            )
        if self._permuted:
            outputs = tuple(
                t if inverse is None else t.contiguous().permute(inverse)
                for t, inverse in zip(outputs, self.inverse_orders)
            )
        return outputs if self.tuple_output else outputs[0]

    @staticmethod
    def _fetch(runtime, result: DeviceArray) -> torch.Tensor:
        host = runtime.to_host(result)
        runtime.free(result.buffer)
        return numpy_to_torch(host)

    def extra_repr(self) -> str:
        return f"{self.kernel_name}, runtime={self.runtime.name}, cache={self.entry}"

    def as_graph(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The call as the graph it stands for returns it: a tuple of outputs."""
        return (self.forward(*args),)


def _to_torch(array: np.ndarray) -> torch.Tensor:
    """``numpy_to_torch`` of a kernel result (``run_host`` made it writable memory of its own):
    ``torch.from_numpy`` at once, except for what it refuses (bf16, negative strides)."""
    try:
        return torch.from_numpy(array)
    except (TypeError, ValueError):
        return numpy_to_torch(array)


def entry(gm: torch.fx.GraphModule) -> Callable[..., Any]:
    """What runs a graph ``compile_graph`` returned, called with the graph's inputs: its
    ``forward``, bound (``nn.Module.__call__`` runs hooks, which a compiled graph has none of,
    and costs as much as a small kernel), or, when the whole graph is one kernel taking the
    graph's inputs in order, that kernel's call itself."""
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    body = nodes[len(placeholders) : -1]
    if (
        len(body) != 1
        or body[0].op != "call_module"
        or body[0].kwargs
        or list(body[0].args) != placeholders
    ):
        return _torch.generated_forward(gm)
    call = getattr(gm, body[0].target)
    result = nodes[-1].args[0]
    if (
        not isinstance(call, KernelCall)
        or call.tuple_output
        or not isinstance(result, (tuple, list))
    ):
        return _torch.generated_forward(gm)
    return call.as_graph if list(result) == body else _torch.generated_forward(gm)


_on_cpu = operator.attrgetter("is_cpu")


def _as_complex(t: torch.Tensor) -> torch.Tensor:
    """A complex output from its real view. An empty one is made anew: NumPy gives empty
    arrays zero strides, which ``view_as_complex`` rejects."""
    return torch.view_as_complex(t if t.numel() else t.new_empty(t.shape))
