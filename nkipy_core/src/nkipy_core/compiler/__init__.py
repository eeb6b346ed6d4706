"""The compile pipeline, FX graph in, kernel calls out. ``pipeline.compile_graph`` runs the stages
in order, one module each: ``prepare`` (graph passes), ``plan`` (a rule per node), ``fallback``
(the ops left on CPU, reported), ``partition`` (fused subgraphs), ``lower`` (one NKIPy kernel per
subgraph), ``kernels`` (kernel cache, compile, ``kernel_call.KernelCall``); ``keys`` holds what
their cache keys depend on besides the graph.

Used by both front ends above it: the dynamo backend (``nkipy_core.dynamo``) and the eager device
(``nkipy_core.device``).
"""
