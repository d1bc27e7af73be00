"""Running each measurement in its own child process (local now; Ray for many hosts later)."""
