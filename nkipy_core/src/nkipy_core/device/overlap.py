"""torch's memory-overlap rules for writes, which the device's in-place ops keep.

A kernel reads all its inputs, then writes its results; torch's CPU loops read and write element
by element. The two agree unless a written tensor shares memory with what the op reads, so torch
refuses the cases it can recognise (``at::assert_no_internal_overlap``,
``assert_no_partial_overlap``) and the device refuses the same ones, with torch's messages.
"""

from __future__ import annotations

import torch

INTERNAL_OVERLAP = (
    "unsupported operation: more than one element of the written-to tensor refers to a single "
    "memory location. Please clone() the tensor before performing the operation."
)
PARTIAL_OVERLAP = (
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to "
    "a single memory location. Please clone() the tensor before performing the operation."
)


def dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements fill a block of its storage, each once (in some dim order)."""
    expected = 1
    for stride, size in sorted((st, n) for n, st in zip(t.shape, t.stride()) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def internally_overlaps(t: torch.Tensor) -> bool:
    """Whether two elements of ``t`` are one memory location (an expanded tensor)."""
    return any(stride == 0 and n > 1 for n, stride in zip(t.shape, t.stride()))


def partially_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """torch's rule (``get_overlap_status``): two dense tensors whose memory intersects without
    being the very same elements in the same order. Non-dense ones are not judged, as torch."""
    if a.numel() == 0 or b.numel() == 0 or not (dense(a) and dense(b)):
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    a0, b0 = a.data_ptr(), b.data_ptr()
    a1, b1 = a0 + a.numel() * a.element_size(), b0 + b.numel() * b.element_size()
    if (a0, a1) == (b0, b1):
        return a.stride() != b.stride()
    return a0 < b1 and b0 < a1


def check_write(target: torch.Tensor, inputs: list[torch.Tensor]) -> None:
    """Refuse what torch refuses before writing ``target`` from ``inputs``."""
    if target.numel() and internally_overlaps(target):
        raise RuntimeError(INTERNAL_OVERLAP)
    if any(t is not target and partially_overlap(target, t) for t in inputs):
        raise RuntimeError(PARTIAL_OVERLAP)
