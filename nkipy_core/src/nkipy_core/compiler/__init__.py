"""The compile pipeline, FX graph in, kernel calls out: plan each node, partition, lower each
partition to an NKIPy kernel, compile it through the kernel cache, call it.

Used by both front ends above it: the dynamo backend (``nkipy_core.dynamo``) and the eager device
(``nkipy_core.device``).
"""
