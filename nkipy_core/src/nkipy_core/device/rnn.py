"""The fused LSTM/GRU cell ops, composed from ATen ops for the device.

For PrivateUse1 devices ``nn.LSTM``/``nn.GRU`` (and their cells) call torch's fused cell kernels,
which exist only for CUDA. These are the same computations written as ATen ops, each of which
runs on the device through the packs like any eager op. The workspaces have CUDA's layouts: the
activated gates ``[i, f, g, o]`` for the LSTM, ``[r, z, n, hx, hn]`` for the GRU.
"""

from __future__ import annotations

import torch


def _gates(input_gates, hidden_gates, input_bias, hidden_bias, chunks: int):
    if input_bias is not None:
        input_gates = input_gates + input_bias
        hidden_gates = hidden_gates + hidden_bias
    return input_gates.chunk(chunks, 1), hidden_gates.chunk(chunks, 1)


def lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    gates = (
        (input_gates + hidden_gates)
        if input_bias is None
        else (input_gates + input_bias + hidden_gates + hidden_bias)
    )
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


def lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_c = torch.zeros_like(cy) if grad_cy is None else grad_cy
    grad_o = torch.zeros_like(o)
    if grad_hy is not None:
        grad_c = grad_c + grad_hy * o * (1 - tanh_cy * tanh_cy)
        grad_o = grad_hy * tanh_cy * o * (1 - o)
    grad_gates = torch.cat(
        [
            grad_c * g * i * (1 - i),
            grad_c * cx * f * (1 - f),
            grad_c * i * (1 - g * g),
            grad_o,
        ],
        1,
    )
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_c * f, grad_bias


def gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    (ir, iz, in_), (hr, hz, hn) = _gates(input_gates, hidden_gates, input_bias, hidden_bias, 3)
    r = (ir + hr).sigmoid()
    z = (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hx, hn], 1)


def gru_cell_backward(grad_hy, workspace, has_bias):
    r, z, n, hx, hn = workspace.chunk(5, 1)
    grad_z = grad_hy * (hx - n) * (1 - z) * z
    grad_hx = grad_hy * z
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_hn = grad_n * r
    grad_r = grad_n * hn * (1 - r) * r
    grad_input_gates = torch.cat([grad_r, grad_z, grad_n], 1)
    grad_hidden_gates = torch.cat([grad_r, grad_z, grad_hn], 1)
    if has_bias:
        return (
            grad_input_gates,
            grad_hidden_gates,
            grad_hx,
            grad_input_gates.sum(0),
            grad_hidden_gates.sum(0),
        )
    return grad_input_gates, grad_hidden_gates, grad_hx, None, None


KERNELS = (
    ("_thnn_fused_lstm_cell", lstm_cell),
    ("_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward),
    ("_thnn_fused_gru_cell", gru_cell),
    ("_thnn_fused_gru_cell_backward", gru_cell_backward),
)
