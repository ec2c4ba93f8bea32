"""Checking a module's outputs against the golden reference (on the host, for now)."""
