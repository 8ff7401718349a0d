"""`python -m idflow` is the same as the `idflow` command."""

from idflow import start

start()
