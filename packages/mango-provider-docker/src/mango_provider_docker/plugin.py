"""Entry point of the mango plugin (hookimpls only)."""
