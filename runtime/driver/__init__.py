"""The driver: runs a job on the Spark cluster it was submitted to."""

from lockgate.runtime.driver.drive import drive
from lockgate.runtime.driver.options import JobSettings, add_job_options, settings_from

__all__ = ["JobSettings", "add_job_options", "drive", "settings_from"]
