"""Host stand-ins for the tensors of one collective, and what to write back once it is done.

Gloo moves host memory. For a ``nkipy`` tensor each collective copies its inputs to host and,
when its work is waited on, copies the results back into the device tensors. Those copies go
through the device (``copy_``), so the runtime counts them as the transfers they are, and a
runtime that can read straight into host memory (``to_host_into``) copies once. CPU tensors
are used in place where gloo can take them.
"""

from __future__ import annotations

import torch

from . import NAME


class Staging:
    def __init__(self) -> None:
        self.write_back: list[tuple[torch.Tensor, torch.Tensor]] = []

    @staticmethod
    def read(t: torch.Tensor) -> torch.Tensor:
        """An input: its values on host (one device-to-host transfer for a device tensor)."""
        return t.detach().cpu().contiguous() if t.device.type == NAME else t

    def update(self, t: torch.Tensor) -> torch.Tensor:
        """An input the collective overwrites (broadcast, reduce)."""
        host = self.read(t)
        if host is not t:
            self.write_back.append((t, host))
        return host

    def output(self, t: torch.Tensor) -> torch.Tensor:
        """An output: host memory of its shape, written back afterwards (no transfer now)."""
        if t.device.type != NAME:
            return t
        host = torch.empty(t.shape, dtype=t.dtype)
        self.write_back.append((t, host))
        return host

    def later(self, t: torch.Tensor, host: torch.Tensor) -> None:
        """Write ``host`` (any layout of ``t``'s elements) into ``t`` when the work finishes."""
        self.write_back.append((t, host))

    def finish(self) -> None:
        for t, host in self.write_back:
            t.copy_(host.view(t.shape) if host.is_contiguous() else host.reshape(t.shape))
        self.write_back.clear()
