"""pytest plugin (entry point `convbench`): filled in by the regression-check work."""
