"""Docker Engine provider for mango."""

__all__: list[str] = []
