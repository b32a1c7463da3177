"""capwatch: continual capability monitoring and differential assessment of deployed agents."""

import capwatch.native as _native

__version__ = "0.1.0"

# Before any hot-path module is imported: a compiled build older than its sources, or
# CAPWATCH_PURE_PYTHON=1, loads them from source (capwatch/native.py).
_native.install()
