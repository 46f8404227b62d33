"""Op families: each owns its config type, config space, case fields, inputs, reference and comparison."""
