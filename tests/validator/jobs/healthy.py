"""Healthy job: a small MLP on scikit-learn's bundled digits data (digits.csv.gz).

    python healthy.py --data digits.csv.gz --out ckpt [--epochs 20] [--lr 0.1]
"""

import argparse
import os

import numpy as np
import torch
from torch import nn


def load(path):
    data = np.loadtxt(path, delimiter=",", dtype=np.float32)
    x = torch.from_numpy(data[:, :64] / 16.0)
    y = torch.from_numpy(data[:, 64].astype(np.int64))
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = load(args.data)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    os.makedirs(args.out, exist_ok=True)
    step = 0
    for epoch in range(args.epochs):
        perm = torch.randperm(len(x))
        for i in range(0, len(x), args.batch_size):
            idx = perm[i : i + args.batch_size]
            loss = loss_fn(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step <= 3:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
        with torch.no_grad():
            acc = (model(x).argmax(1) == y).float().mean().item()
        print(f"epoch {epoch + 1} loss {loss.item():.4f} acc {acc:.3f}", flush=True)
        torch.save(model.state_dict(), os.path.join(args.out, "model.pt"))


if __name__ == "__main__":
    main()
