"""capwatch: continual capability monitoring and differential assessment of deployed agents."""

__version__ = "0.1.0"
