import sys, collections, torch, warnings
import nkipy_core.backend as B
from nkipy_core.testing.models import QuickStartMLP, LlamaBlock
ops = collections.Counter()
orig = B.compile_graph
def spy(gm, inputs, config):
    for n in gm.graph.nodes:
        if n.op == "call_function":
            ops[str(n.target)] += 1
    if "-v" in sys.argv: print(gm.graph)
    return orig(gm, inputs, config)
B.compile_graph = spy
which = sys.argv[1]; dtype = getattr(torch, sys.argv[2])
if which == "mlp":
    m = QuickStartMLP().to(dtype); x = torch.randn(8, 64, dtype=dtype, requires_grad=True)
else:
    m = LlamaBlock(sdpa=which == "sdpa").to(dtype); x = m.example_input(dtype).requires_grad_()
c = torch.compile(m, backend="nkipy")
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    y = c(x); y.sum().backward()
for ww in w: print("WARN", ww.message)
for k, v in sorted(ops.items()): print(v, k)
