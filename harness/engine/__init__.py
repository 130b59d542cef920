"""The drill engine: the runner in phases, measures, expectations, vital signs."""
