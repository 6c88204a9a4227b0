"""Directory put first on the dry-run child's PYTHONPATH; holds the injected ``sitecustomize``."""

__all__: list[str] = []
