"""`python -m pipeline` is the same as the `idflow` command."""

from pipeline.cli import main

main()
