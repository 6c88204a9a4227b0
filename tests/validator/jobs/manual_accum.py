"""Gradient accumulation without torch.optim: 3 backward passes, then a hand-written update.

    python manual_accum.py [anything]   (arguments are ignored)
"""

import torch

torch.manual_seed(0)
w = torch.zeros(10, requires_grad=True)
target = torch.arange(10.0)
for step in range(100000):
    for _micro in range(3):
        loss = ((w - target) ** 2).mean() / 3
        loss.backward()
    with torch.no_grad():
        w.add_(w.grad, alpha=-0.5)
        w.grad.zero_()
    print(f"step {step + 1} loss {loss.item() * 3:.4f}", flush=True)
