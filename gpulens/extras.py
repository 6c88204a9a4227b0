"""Guard imports of optional dependency groups ("extras")."""

from __future__ import annotations

import importlib
from types import ModuleType

from gpulens.errors import MissingExtraError

__all__ = ["require"]

#: module name -> (pip distribution, extra that provides it)
_PROVIDERS: dict[str, tuple[str, str]] = {
    "pynvml": ("nvidia-ml-py", "gpu"),
    "sklearn": ("scikit-learn", "ml"),
    "pgmpy": ("pgmpy", "ml"),
    "drain3": ("drain3", "ml"),
    "streamlit": ("streamlit", "dashboard"),
    "altair": ("altair", "dashboard"),
    "pyspark": ("pyspark", "spark"),
    "pyspark.sql": ("pyspark", "spark"),
    "pyspark.sql.functions": ("pyspark", "spark"),
}


def require(module: str, extra: str | None = None) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        dist, default_extra = _PROVIDERS.get(module, (module, extra or "all"))
        wanted = extra or default_extra
        raise MissingExtraError(
            f"{dist} is not installed, and this feature needs it.",
            f"Install it with: pip install 'gpulens[{wanted}]'",
        ) from exc
