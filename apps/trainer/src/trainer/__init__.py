"""The FastSAC trainer app."""

__all__: list[str] = []
