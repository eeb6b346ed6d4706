"""Shape buckets: pad a dimension to one of a few sizes, so that a function compiles a few kernel
graphs instead of one per size.

Kernels are static: every new input size a compiled function meets is a new kernel graph, and on
Trainium each one is minutes of ``neuronx-cc``. Padding a dimension up to the next *bucket*
(powers of two by default, or sizes you choose) bounds the graphs to the number of buckets.

Padding is sound only where the padded elements cannot change the real ones: a generation prompt
padded on the left under its attention mask (the model ignores masked positions; Hugging Face
derives the position ids from the mask), or a batch of independent rows. It is not sound for
an arbitrary input, because a reduction over the padded dimension (a softmax, a mean, a norm)
sees the padding. That is why the backend never pads by itself: you apply these helpers where
you know the dimension may be padded.

- ``next_bucket(n, buckets)``: the size ``n`` is padded to.
- ``pad_to_bucket(tensor, dim, value, buckets, side)``: ``tensor`` padded along ``dim``.
- ``generate(model, input_ids, ...)``: Hugging Face ``model.generate`` with the prompt left-padded
  to its bucket (and, with ``pad_batch=True``, the batch padded with copies of its first row); the result is
  what ``generate`` returns for the unpadded prompt: the prompt, then the new tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - torch's own convention

__all__ = ["generate", "next_bucket", "pad_to_bucket"]


def next_bucket(n: int, buckets: Sequence[int] | None = None) -> int:
    """The smallest bucket that holds ``n``: the next power of two (``n`` itself if it is one),
    or the smallest of ``buckets`` that is at least ``n``. A size larger than every bucket of an
    explicit list is a ``ValueError``: add a larger bucket (it would compile a graph of its own)."""
    if n < 0:
        raise ValueError(f"a size is at least 0, got {n}")
    if buckets is None:
        return 1 << max(n - 1, 0).bit_length()
    fitting = [b for b in buckets if b >= n]
    if not fitting:
        raise ValueError(
            f"size {n} is larger than every bucket {sorted(buckets)}; add a bucket of at least {n}"
        )
    return min(fitting)


def pad_to_bucket(
    tensor: torch.Tensor,
    dim: int,
    value: float = 0,
    buckets: Sequence[int] | None = None,
    side: str = "right",
) -> torch.Tensor:
    """``tensor`` padded with ``value`` along ``dim`` to ``next_bucket`` of its size there, on
    the ``"right"`` (after the elements) or the ``"left"``; ``tensor`` itself if it fits. Slice
    the result back with ``narrow(dim, 0, n)`` (right) or ``narrow(dim, padded - n, n)`` (left)."""
    if side not in ("left", "right"):
        raise ValueError(f"side is 'left' or 'right', got {side!r}")
    dim = dim % tensor.dim()
    size = tensor.shape[dim]
    missing = next_bucket(size, buckets) - size
    if not missing:
        return tensor
    widths = [0, 0] * (tensor.dim() - dim)  # F.pad lists the last dimension first
    widths[-2 if side == "left" else -1] = missing
    return F.pad(tensor, widths, value=value)


def generate(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    buckets: Sequence[int] | None = None,
    pad_batch: bool = False,
    batch_buckets: Sequence[int] | None = None,
    **generate_kwargs: Any,
) -> torch.Tensor:
    """``model.generate(input_ids, attention_mask=..., **generate_kwargs)`` (a Hugging Face
    generative model) with the prompt left-padded to ``next_bucket`` of its length, and the tokens
    it returns for the unpadded prompt: the prompt, then the new tokens.

    The padding is masked out (``attention_mask`` 0) and takes the model's pad token, else its end
    of sequence token, else 0. ``input_ids`` must already be left-padded if its rows differ in
    length (``attention_mask`` says where). ``pad_batch=True`` pads the batch too, to
    ``next_bucket(rows, batch_buckets)``, with copies of the first row whose results are dropped:
    rows are independent, so the copies change nothing. Only the token tensor is returned
    (``return_dict_in_generate`` is not supported)."""
    if generate_kwargs.get("return_dict_in_generate"):
        raise ValueError("nkipy_core.buckets.generate returns the tokens only")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    rows, length = input_ids.shape
    padded_ids = pad_to_bucket(input_ids, 1, _pad_token(model), buckets, "left")
    padded_mask = pad_to_bucket(attention_mask, 1, 0, buckets, "left")
    if pad_batch:
        extra = next_bucket(rows, batch_buckets) - rows
        padded_ids = torch.cat([padded_ids, padded_ids[:1].expand(extra, -1)])
        padded_mask = torch.cat([padded_mask, padded_mask[:1].expand(extra, -1)])
    out = model.generate(input_ids=padded_ids, attention_mask=padded_mask, **generate_kwargs)
    return torch.cat([input_ids, out[:rows, padded_ids.shape[1] :].to(input_ids.device)], dim=1)


def _pad_token(model: Any) -> int:
    """The model's pad token, else its end of sequence token (the first, if several), else 0."""
    config = getattr(model, "generation_config", None)
    for name in ("pad_token_id", "eos_token_id"):
        token = getattr(config, name, None)
        if isinstance(token, (list, tuple)):
            token = token[0] if token else None
        if token is not None:
            return int(token)
    return 0
