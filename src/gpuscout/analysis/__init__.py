"""Statistics, flags and derived figures; pure functions over measured data."""
