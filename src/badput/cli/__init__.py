"""The `badput` command line."""
