import torch, warnings
warnings.simplefilter("ignore")
from nkipy_core.testing.models import LlamaBlock
m = LlamaBlock(sdpa=True); x = m.example_input().requires_grad_()
m(x).sum().backward(); g = x.grad.clone(); x.grad = None
c = torch.compile(m, backend="nkipy")
c(x).sum().backward()
print((x.grad - g).abs().max())
