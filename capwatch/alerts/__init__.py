"""capwatch.alerts."""
