"""Hand-written SGD on an nn.Module, ``with torch.no_grad(): p -= lr * p.grad``, and torch.autograd.backward.

    python manual_no_grad.py [anything]   (arguments are ignored)
"""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
x = torch.randn(128, 16)
y = torch.randint(0, 4, (128,))
for epoch in range(100000):
    loss = nn.functional.cross_entropy(model(x), y)
    model.zero_grad()
    torch.autograd.backward(loss)
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
    if epoch < 3:
        print(f"epoch {epoch} loss {loss.item():.4f}", flush=True)
