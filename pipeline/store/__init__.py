"""What a run writes under OUT, and how: Parquet parts (results, failures, summaries), atomic state files, the
output lock, files held for a process's lifetime, the crash journal."""
