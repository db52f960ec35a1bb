"""The user-facing job API: streams, functions, connectors, and the job graph."""
