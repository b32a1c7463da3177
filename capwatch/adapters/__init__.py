"""capwatch.adapters."""
