"""A job's spec: the StreamingJob model, the one place each setting's default, bound
and description is written, and what reads it (durations, manifests, errors).
A leaf: `lockgate run`, the driver, the operator and the CRD generator derive
their flags, arguments and schema from it; it imports no engine, driver or Spark."""
