"""Which OpInfos of PyTorch's database test which lowered ATen ops: the conformance cases.

OpInfos are matched to lowered ops by name (see ``conformance``'s docstring); ``EXTRA_OPINFOS``
names the OpInfos whose names differ from the op they reach.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Collection, Iterable
from typing import Any

import attrs

from nkipy_core import _torch
from nkipy_core.plugin import manager as plugins
from nkipy_core.plugin.registry import op_name

#: ATen packet -> OpInfo names that reach it although their names differ
EXTRA_OPINFOS: dict[str, tuple[str, ...]] = {
    "convolution": (
        "nn.functional.conv1d",
        "nn.functional.conv2d",
        "nn.functional.conv3d",
        "nn.functional.conv_transpose1d",
        "nn.functional.conv_transpose2d",
        "nn.functional.conv_transpose3d",
    ),
    "convolution_backward": ("nn.functional.conv1d", "nn.functional.conv2d"),
    "mm": ("matmul", "nn.functional.linear"),
    "bmm": ("matmul",),
    "addmm": ("nn.functional.linear",),
    "_native_batch_norm_legit": ("nn.functional.batch_norm",),
    "_native_batch_norm_legit_no_training": ("nn.functional.batch_norm",),
    "_native_batch_norm_legit_functional": ("nn.functional.batch_norm",),
    "max_pool2d_with_indices": ("nn.functional.max_pool2d",),
    "max_pool2d_with_indices_backward": ("nn.functional.max_pool2d",),
    "embedding_dense_backward": ("nn.functional.embedding",),
    "_embedding_bag_forward_only": ("nn.functional.embedding_bag",),
    "_embedding_bag_dense_backward": ("nn.functional.embedding_bag",),
    "_embedding_bag_per_sample_weights_backward": ("nn.functional.embedding_bag",),
    "grid_sampler_2d": ("nn.functional.grid_sample",),
    "threshold_backward": ("nn.functional.relu", "nn.functional.threshold"),
    "_to_copy": ("to",),
    "slice": ("narrow",),
    "_unsafe_view": ("view", "reshape"),
    "index": ("__getitem__",),
    "zero": ("zero_",),
    "normal_functional": ("normal",),
    "_scaled_dot_product_flash_attention_for_cpu": ("nn.functional.scaled_dot_product_attention",),
    "_scaled_dot_product_flash_attention": ("nn.functional.scaled_dot_product_attention",),
    "_scaled_dot_product_efficient_attention": ("nn.functional.scaled_dot_product_attention",),
    "_fft_c2c": ("fft.fft", "fft.ifft", "fft.fft2", "fft.fftn", "fft.ifft2", "fft.ifftn", "istft"),
    "_fft_r2c": (
        *("fft.fft", "fft.rfft", "fft.ihfft", "fft.fft2", "fft.fftn", "fft.rfft2", "fft.rfftn"),
        *("fft.ihfft2", "fft.ihfftn", "stft"),
    ),
    "_fft_c2r": (
        *("fft.irfft", "fft.hfft", "fft.irfft2", "fft.irfftn", "fft.hfft2", "fft.hfftn"),
        "istft",
    ),
    "linalg_cholesky_ex": ("linalg.cholesky",),
    "linalg_lu_factor_ex": ("linalg.lu_factor", "lu"),
    "linalg_inv_ex": ("linalg.inv",),
    "_linalg_solve_ex": ("linalg.solve", "linalg.solve_ex"),
    "_linalg_det": ("linalg.det",),
    "_linalg_slogdet": ("linalg.slogdet", "logdet"),
    "_linalg_eigh": ("linalg.eigvalsh",),
    "_linalg_svd": ("linalg.svdvals", "svd"),
    "linalg_matrix_exp": ("matrix_exp",),
    "_histogramdd_bin_edges": ("histogramdd",),
    "_histogramdd_from_bin_cts": ("histogramdd",),
    "_histogramdd_from_bin_tensors": ("histogramdd",),
}

#: name prefixes whose last component is itself a torch op name
_NAMESPACES = ("nn.functional.", "special.")


def load_op_db() -> list[Any]:
    """PyTorch's OpInfo list (``common_methods_invocations.op_db``); imported on first use."""
    try:
        import expecttest  # noqa: F401
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "the conformance harness imports PyTorch's OpInfo database, which needs `expecttest`: "
            "pip install 'nkipy-core[testing]'"
        ) from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _torch.common_methods_invocations.op_db


# -- selecting cases ------------------------------------------------------------------------------


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lowered_ops(target: str | Iterable[Any]) -> list[str]:
    """The ATen overload names ``target`` stands for.

    ``target`` is a distribution (``"nkipy-ops-base"``) or plugin name, whose registered rules
    are listed from the loaded plugins; an overload name (``"aten::exp.default"``); or an
    iterable of overload names, ``OpOverload``s or ``OpOverloadPacket``s (all their overloads).
    """
    if isinstance(target, str) and "::" not in target:
        wanted = _normalise(target)
        registry = plugins.get().lowerings
        ops = sorted(
            {
                rule.op
                for rule in registry.all_rules()
                if wanted
                in (_normalise(rule.provenance.distribution), _normalise(rule.provenance.plugin))
            }
        )
        if not ops:
            known = sorted({rule.provenance.distribution for rule in registry.all_rules()})
            raise ValueError(
                f"no loaded plugin named {target!r} registers lowering rules; distributions with "
                f"rules: {known or 'none'}. Install the pack, or pass a list of ATen overloads."
            )
        return ops
    items = (
        [target]
        if isinstance(target, (str, _torch.OpOverload, _torch.OpOverloadPacket))
        else target
    )
    names: list[str] = []
    for item in items:
        if isinstance(item, _torch.OpOverloadPacket):
            names.extend(op_name(getattr(item, o)) for o in item.overloads())
        else:
            names.append(op_name(item))
    return sorted(set(names))


def packet(overload: str) -> str:
    """``aten::add.Tensor`` -> ``aten::add``."""
    return overload.rsplit(".", 1)[0]


def _packet_keys(packet: str) -> tuple[set[str], bool]:
    """OpInfo names an ATen packet answers to, and whether it only runs in backward graphs."""
    namespace, name = packet.split("::")
    if namespace != "aten":
        return set(), False
    keys = {name, *EXTRA_OPINFOS.get(name, ())}
    base, backward = name, False
    for suffix in ("_backward_data", "_backward"):
        if base.endswith(suffix):
            base, backward = base[: -len(suffix)], True
            break
    keys.update(EXTRA_OPINFOS.get(base, ()))
    base = base.lstrip("_")
    if base.startswith("native_"):
        base = base[len("native_") :]
    if base.endswith("_") and not base.endswith("__"):
        base = base[:-1]
    keys.add(base)
    return keys, backward


def _opinfo_keys(opinfo: Any) -> set[str]:
    names = [opinfo.name, opinfo.aten_name, *(a.name for a in getattr(opinfo, "aliases", ()))]
    keys = set()
    for name in names:
        if not name:
            continue
        keys.add(name)
        for prefix in _NAMESPACES:
            if name.startswith(prefix):
                keys.add(name[len(prefix) :])
        if name.startswith("torch."):
            keys.add(name[len("torch.") :])
        if name.startswith("special."):
            # ATen spells torch.special.f as special_f (some OpInfos give no aten_name)
            keys.add("special_" + name[len("special.") :])
    return keys


@attrs.frozen
class OpCase:
    """One OpInfo (``name.variant``) and the lowered overloads its samples should reach.

    ``opinfo`` is ``None`` for a lowered overload that no OpInfo covers (always a ``skip`` row).
    ``backward_only`` means every target only appears in backward graphs (backward is forced on).
    """

    name: str
    targets: tuple[str, ...]
    opinfo: Any = attrs.field(default=None, eq=False, repr=False)
    backward_only: bool = False

    def __str__(self) -> str:
        return self.name


def conformance_cases(
    target: str | Iterable[Any],
    *,
    include: Collection[str] | None = None,
    exclude: Collection[str] = (),
) -> list[OpCase]:
    """The cases for ``target`` (see ``lowered_ops``), sorted by name.

    ``include``/``exclude`` filter by case name (``"div.trunc_rounding"``), OpInfo name
    (``"div"``) or target overload (``"aten::div.Tensor_mode"``).
    """
    ops = lowered_ops(target)
    by_key: dict[str, list[tuple[str, bool]]] = {}
    for overload in ops:
        keys, backward = _packet_keys(packet(overload))
        for key in keys:
            by_key.setdefault(key, []).append((overload, backward))
    cases: list[OpCase] = []
    covered: set[str] = set()
    for opinfo in load_op_db():
        hits = {hit for key in _opinfo_keys(opinfo) for hit in by_key.get(key, ())}
        if not hits:
            continue
        targets = tuple(sorted({overload for overload, _ in hits}))
        covered.update(targets)
        backward_only = all(backward for _, backward in hits)
        cases.append(OpCase(opinfo.full_name, targets, opinfo, backward_only))
    cases.extend(OpCase(overload, (overload,)) for overload in ops if overload not in covered)

    def wanted(case: OpCase) -> bool:
        names = {
            case.name,
            case.name.split(".")[0] if case.opinfo is None else case.opinfo.name,
            *case.targets,
        }
        if include is not None and not names & set(include):
            return False
        return not names & set(exclude)

    return sorted((c for c in cases if wanted(c)), key=lambda c: c.name)
