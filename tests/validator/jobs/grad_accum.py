"""Gradient accumulation: 4 backward passes per optimizer step.

    python grad_accum.py [anything]   (arguments are ignored)
"""

import torch

ACCUM = 4
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(100000):
    for micro in range(ACCUM):
        x = torch.randn(8, 16)
        loss = model(x).pow(2).mean() / ACCUM
        loss.backward()
        print(f"step {step} micro {micro} loss {loss.item():.5f}", flush=True)
    opt.step()
    opt.zero_grad(set_to_none=True)
