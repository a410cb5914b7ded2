"""topology."""

__all__: list[str] = []
