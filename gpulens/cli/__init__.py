"""The ``gpulens`` command line. Feature packages register commands lazily in main.py."""

from gpulens.cliapp import App, emit, json_option, pass_app, progress

__all__ = ["App", "emit", "json_option", "pass_app", "progress"]
