"""What a user sees of the compiler at work: per-kernel counters and profiler events, and the
progress bar of slow compile batches."""
