"""The driver: runs a job on the Spark cluster it was submitted to.

Its modules are imported by name (`driver.options`, `driver.drive`): this package
imports none of them, so a command that needs only the option types
(`driver.option_types`, e.g. `lockgate operator`) does not load the job master."""
