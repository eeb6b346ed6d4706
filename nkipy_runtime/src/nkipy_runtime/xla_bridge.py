"""The one place that touches jaxlib's private APIs: StableHLO -> ``HloModuleProto``, and
compiling and running StableHLO on an XLA device (the ``xla`` runtime).

``neuronx-cc compile --framework XLA`` reads a serialized ``HloModuleProto``. jaxlib is the
well-kept library that converts StableHLO to it, but only through
``jax._src.lib.xla_client._xla.mlir.mlir_module_to_xla_computation``, which is private and has
moved between releases; so have the client's ``compile_and_load`` and ``execute_sharded``. This
module checks the installed version once and turns every failure into a ``HloConversionError``
(or ``XlaCompileError``) that says what to install or what went wrong.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs

from nkipy_core.errors import NkipyError

#: jaxlib releases whose private conversion entry point this module was checked against
SUPPORTED_JAXLIB = ((0, 4, 30), (0, 11, 0))  # [lowest, first unsupported)


class HloConversionError(NkipyError):
    """StableHLO could not be turned into an ``HloModuleProto``."""


class XlaCompileError(NkipyError):
    """XLA rejected a StableHLO module it was asked to compile."""


@attrs.frozen
class HloModule:
    """One kernel's HLO: the serialized proto ``neuronx-cc`` reads, and its text for people."""

    proto: bytes
    text: str


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:3] if p.isdigit())


@functools.cache
def _mlir_bindings() -> Any:
    try:
        import jaxlib
        from jax._src.lib import xla_client
    except ImportError as exc:
        raise HloConversionError(
            f"turning kernels into HLO needs jax and jaxlib ({exc}); "
            "install them with `pip install 'nkipy-runtime[xla]'`"
        ) from None
    found = _version(jaxlib.__version__)
    low, high = SUPPORTED_JAXLIB
    if not low <= found < high:
        raise HloConversionError(
            f"jaxlib {jaxlib.__version__} is not supported for HLO conversion (need >= "
            f"{'.'.join(map(str, low))}, < {'.'.join(map(str, high))}); install a jaxlib in that range"
        )
    mlir = getattr(getattr(xla_client, "_xla", None), "mlir", None)
    if mlir is None or not hasattr(mlir, "mlir_module_to_xla_computation"):
        raise HloConversionError(
            f"jaxlib {jaxlib.__version__} lacks mlir_module_to_xla_computation; install a jaxlib in "
            f"the supported range {SUPPORTED_JAXLIB}"
        )
    return mlir


def available() -> tuple[bool, str]:
    """(True, jaxlib version) or (False, why HLO conversion cannot work here)."""
    try:
        _mlir_bindings()
    except HloConversionError as exc:
        return False, str(exc)
    import jaxlib

    return True, f"jaxlib {jaxlib.__version__}"


def to_hlo(stablehlo: str) -> HloModule:
    """Convert a StableHLO module; a malformed module raises ``HloConversionError`` with the
    parser's message (which names the line)."""
    mlir = _mlir_bindings()
    try:
        computation = mlir.mlir_module_to_xla_computation(stablehlo, use_tuple_args=False, return_tuple=False)
    except Exception as exc:  # noqa: BLE001 - jaxlib raises its own untyped errors
        raise HloConversionError(f"jaxlib rejected the StableHLO module: {exc}") from None
    return HloModule(computation.as_serialized_hlo_module_proto(), computation.as_hlo_text())


def devices(platform: str = "cpu") -> list[Any]:
    """The XLA devices of ``platform`` that jax sees (``cpu``, ``gpu``)."""
    _mlir_bindings()
    import jax

    return list(jax.devices(platform))


def compile_stablehlo(stablehlo: str, device: Any) -> Any:
    """An XLA executable of ``stablehlo`` loaded on ``device``."""
    _mlir_bindings()
    from jax._src.lib import xla_client

    try:
        return device.client.compile_and_load(
            stablehlo.encode(), executable_devices=xla_client.DeviceList((device,)),
            compile_options=xla_client.CompileOptions(),
        )
    except Exception as exc:  # noqa: BLE001 - jaxlib raises its own untyped errors
        raise XlaCompileError(f"XLA could not compile the kernel: {exc}") from None


def execute(executable: Any, arrays: list[Any]) -> list[Any]:
    """Run an executable on jax arrays (one per parameter); its outputs as new jax arrays."""
    results = executable.execute_sharded(arrays)
    return [outs[0] for outs in results.disassemble_into_single_device_arrays()]
