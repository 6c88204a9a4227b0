from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools import typing_only  # noqa: F401  (never runs)


def pick(name):
    return name
