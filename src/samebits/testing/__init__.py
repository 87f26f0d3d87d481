"""Test harnesses that run the real engine against the executable spec."""
