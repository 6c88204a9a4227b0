"""gpulens core: configuration, errors and the store shared by every part."""

from gpulens.errors import GpulensError

__version__ = "0.1.0"

__all__ = ["GpulensError", "__version__"]
