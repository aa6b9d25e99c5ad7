"""The worker API (being moved here)."""
