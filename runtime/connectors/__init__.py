"""Sources and sinks that ship with Lockgate."""
