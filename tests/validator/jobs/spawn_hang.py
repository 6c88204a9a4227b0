"""Broken job: a launcher that starts workers (one escaping into its own session) and waits
for a rendezvous that never happens. ``--busy`` makes every process spin instead of sleep.

    python spawn_hang.py [--busy] [--pids FILE]
"""

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import time


def idle_or_spin(busy):
    while True:
        if busy:
            sum(range(10000))
        else:
            time.sleep(3600)


def escaping_worker(busy, pids):
    os.setsid()  # leaves the launcher's process group and session
    with open(pids, "a") as fh:
        fh.write(f"{os.getpid()}\n")
    idle_or_spin(busy)


def worker(busy, pids):
    with open(pids, "a") as fh:
        fh.write(f"{os.getpid()}\n")
    idle_or_spin(busy)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--busy", action="store_true")
    parser.add_argument("--pids", default="pids.txt")
    args = parser.parse_args()
    pids = os.path.abspath(args.pids)
    with open(pids, "w") as fh:
        fh.write(f"{os.getpid()}\n")
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=worker, args=(args.busy, pids)) for _ in range(2)]
    procs.append(ctx.Process(target=escaping_worker, args=(args.busy, pids)))
    for p in procs:
        p.start()
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(3600)"] if not args.busy
        else [sys.executable, "-c", "while True: pass"]
    )
    with open(pids, "a") as fh:
        fh.write(f"{sleeper.pid}\n")
    print(f"launched {len(procs) + 1} workers, waiting for rendezvous", flush=True)
    idle_or_spin(args.busy)


if __name__ == "__main__":
    main()
