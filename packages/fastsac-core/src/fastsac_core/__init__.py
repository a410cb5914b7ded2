"""fastsac-core."""

__all__: list[str] = []
