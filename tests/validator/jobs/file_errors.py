"""Reads and writes files the way training scripts do; each --mode fails in one way.

    python file_errors.py --mode MODE [--data PATH] [--resume PATH] [--out DIR]

modes: assert_exists (``assert os.path.exists(args.data)``), load_data (torch.load of
the training data), resume (torch.load of a checkpoint), weights_only (torch.load of
a file holding a numpy array, refused by the weights_only default), save (torch.save
into a directory that does not exist).
"""

import argparse
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--mode", required=True)
parser.add_argument("--data", default="data/train.pt")
parser.add_argument("--resume", default="")
parser.add_argument("--out", default="out")
args = parser.parse_args()

if args.mode == "assert_exists":
    assert os.path.exists(args.data), f"{args.data} not found"
    sys.exit(0)

import numpy as np  # noqa: E402
import torch  # noqa: E402

if args.mode == "load_data":
    x = torch.load(args.data)
elif args.mode == "resume":
    state = torch.load(args.resume)
elif args.mode == "weights_only":
    os.makedirs(os.path.dirname(args.data) or ".", exist_ok=True)
    torch.save(np.arange(10.0), args.data)  # what an old data-preparation script wrote
    x = torch.load(args.data)
elif args.mode == "save":
    model = torch.nn.Linear(2, 2)
    torch.save(model.state_dict(), os.path.join(args.out, "sub", "model.pt"))
