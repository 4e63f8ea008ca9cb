"""Daytona provider for mango (preview)."""
