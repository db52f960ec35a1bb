"""The streaming engine: tasks, channels, barriers, and the exchange between tasks."""
