"""mango-conformance command line."""


def main() -> None:
    """Entry point."""
