"""Presentation only: turns analysis results into text, JSON and other formats."""
