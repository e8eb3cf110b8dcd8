"""The code-speculation benchmark: streamed programs, arms (serial, forethought, spec-ptc), metrics."""
