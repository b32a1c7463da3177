"""capwatch.monitor."""
