"""Replay: re-run a past range of raw flows and counters through the processors' logic, deterministically."""
