"""Command bodies beside a run: doctor, drift canaries, evaluation, retry, batch files, estimates."""
