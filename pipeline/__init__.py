"""idflow: scanned identity documents in, validated records and a failure queue out."""

__version__ = "0.1.0"
