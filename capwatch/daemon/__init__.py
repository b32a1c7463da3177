"""capwatch.daemon."""
