"""The project's fetch worker (being moved here)."""
