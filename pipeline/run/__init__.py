"""One run over a stream of documents: the `engine` (the stages with back-pressure), what a run on an output folder
owns, written once (`session`: lock, done set, crash journal, writer, tally, summary), `batches` (a run's documents
in batches a person can watch), and the run's accounting and report."""
