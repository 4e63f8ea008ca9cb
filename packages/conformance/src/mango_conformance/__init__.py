"""The mango provider conformance suite."""

__all__: list[str] = []
