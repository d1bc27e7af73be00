"""The measurement protocol; everything here runs in the child process."""
