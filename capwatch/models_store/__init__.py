"""capwatch.models_store."""
