"""Kernel interface, registry and selection, targets, runtime (device or interpreter), records."""
