import argparse


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1)
    return parser.parse_args()
