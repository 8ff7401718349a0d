"""What a run writes under OUT: Parquet parts, the failure queue, atomic files, the output lock, the crash journal."""
