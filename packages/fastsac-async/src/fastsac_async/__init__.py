"""fastsac-async."""

__all__: list[str] = []
