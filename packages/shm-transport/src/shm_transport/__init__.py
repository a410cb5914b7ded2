"""shm-transport."""

__all__: list[str] = []
