"""Run by train.py with exec(open(...).read()), as nanoGPT runs its configurator."""

steps_default = 1
