"""Fetch workers: consume leased jobs, fetch politely, publish pages and feedback."""
