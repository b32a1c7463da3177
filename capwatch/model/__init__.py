"""capwatch.model."""
