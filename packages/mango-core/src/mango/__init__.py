"""mango: one durable sandbox per AI-agent Session, on any backend."""

__version__ = "0.1.0"

__all__ = ["__version__"]
