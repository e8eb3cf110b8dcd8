"""Real inference engines in the loop: adapters that start, drive and measure them (vLLM today)."""
