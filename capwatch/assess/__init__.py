"""capwatch.assess."""
