"""The scenario specification: schema, model, loading and every rule a scenario must keep."""
