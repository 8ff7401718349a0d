"""What a run on an output folder owns, written once: `session` (lock, done set, crash journal, writer, tally,
summary) and `batches` (a run's documents in batches a person can watch, over one engine stream)."""
