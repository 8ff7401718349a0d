"""The `idflow` command line: the top layer. It imports `flows/` (Prefect) and `pipeline/` (the library); neither
imports it back."""
