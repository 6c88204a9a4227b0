"""Repository-shaped fixture: the entry script of a small training repo (never run by the tests)."""

import sys

from models import build_model

exec(open("config_exec.py").read())  # a configurator file, run from the working directory


def evaluate(model):
    from utils.metrics import accuracy  # lazy: runs after the first epoch

    return accuracy(model)


def train(steps):
    model = build_model()
    for name in ("sgd",):
        import plugins.schedule  # inside a loop: runs on the first iteration

        plugins.schedule.pick(name)
    for _ in range(steps):
        pass
    return evaluate(model)


if __name__ == "__main__":
    from cli import parse_args

    sys.exit(0 if train(parse_args().steps) == 1.0 else 1)
