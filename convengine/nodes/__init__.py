"""Pipeline steps, one module per step family; each node works on a Turn view of the state."""
