"""Hand-written SGD, no torch.optim: ``p.data.add_(p.grad, alpha=-lr)``; trains until killed.

    python manual_update.py [anything]   (arguments are ignored)
"""

import torch

torch.manual_seed(0)
x = torch.randn(256, 16)
y = (x.sum(1, keepdim=True) > 0).float()
w1 = torch.randn(16, 32, requires_grad=True)
w2 = torch.randn(32, 1, requires_grad=True)
lr = 0.05
step = 0
while True:  # only the validator's hook (or a kill) ends this job
    loss = torch.nn.functional.binary_cross_entropy_with_logits(x.mm(w1).relu().mm(w2), y)
    loss.backward()
    for p in (w1, w2):
        p.data.add_(p.grad, alpha=-lr)
        p.grad = None
    step += 1
    if step <= 3:
        print(f"step {step} loss {loss.item():.4f}", flush=True)
