"""Prefect flows composing the plain stages in `pipeline/`."""
