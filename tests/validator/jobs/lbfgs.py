"""L-BFGS with a closure: many backward passes inside each optimizer step.

    python lbfgs.py [anything]   (arguments are ignored)
"""

import torch

torch.manual_seed(0)
x = torch.randn(64, 8)
y = x @ torch.randn(8, 1) + 0.1 * torch.randn(64, 1)
model = torch.nn.Linear(8, 1)
opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)
calls = 0


def closure():
    global calls
    calls += 1
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


for step in range(100000):
    loss = opt.step(closure)
    print(f"step {step + 1} loss {loss.item():.5f} closure calls so far {calls}", flush=True)
