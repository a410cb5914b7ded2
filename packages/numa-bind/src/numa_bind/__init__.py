"""numa-bind."""

__all__: list[str] = []
