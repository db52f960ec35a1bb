#!/usr/bin/env bash
# The image's entrypoint. Spark starts its executor pods with the single
# argument `executor` and describes the executor in their environment; that
# runs Spark's Kubernetes executor backend from the pyspark installation.
# Anything else is a command to run as given: `lockgate operator ...`, the
# driver (`python -m lockgate.runtime.driver.submit ...`), a shell.
set -euo pipefail

if [[ "${1:-}" != "executor" ]]; then
  exec "$@"
fi

for required in SPARK_HOME SPARK_DRIVER_URL SPARK_EXECUTOR_ID SPARK_EXECUTOR_CORES \
  SPARK_APPLICATION_ID SPARK_EXECUTOR_POD_IP SPARK_EXECUTOR_MEMORY; do
  if [[ -z "${!required:-}" ]]; then
    echo "entrypoint.sh executor: \$${required} is not set (Spark sets it on the executor pods it creates)" >&2
    exit 2
  fi
done

# The driver passes the executor's JVM options as SPARK_JAVA_OPT_0, _1, ... in order.
java_options=()
for name in $(compgen -e | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n); do
  java_options+=("${!name}")
done

exec "${JAVA_HOME:+${JAVA_HOME}/bin/}java" \
  "${java_options[@]}" \
  "-Xms${SPARK_EXECUTOR_MEMORY}" "-Xmx${SPARK_EXECUTOR_MEMORY}" \
  -cp "${SPARK_CONF_DIR:-/opt/spark/conf}:${SPARK_HOME}/jars/*${SPARK_DIST_CLASSPATH:+:${SPARK_DIST_CLASSPATH}}" \
  org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
  --driver-url "${SPARK_DRIVER_URL}" \
  --executor-id "${SPARK_EXECUTOR_ID}" \
  --cores "${SPARK_EXECUTOR_CORES}" \
  --app-id "${SPARK_APPLICATION_ID}" \
  --hostname "${SPARK_EXECUTOR_POD_IP}" \
  --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
  --podName "${SPARK_EXECUTOR_POD_NAME:-$(hostname)}"
