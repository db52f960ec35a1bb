"""The Spark adapter: the only place Lockgate imports pyspark."""

from lockgate.runtime.spark.session import local_session, spark_session
from lockgate.runtime.spark.stage import BarrierStage

__all__ = ["BarrierStage", "local_session", "spark_session"]
