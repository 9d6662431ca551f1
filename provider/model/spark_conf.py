"""Which Spark settings a job may carry in its JobGraph `config`.

A job's `config` is applied to the job's own Spark Connect session with `spark.conf.set`, on
the TaskExecutor's shared Spark driver. What Spark will not change there is refused at
submission, so a job does not fail the same way at every attempt:

- static SQL settings (`spark.sql.warehouse.dir`, `spark.sql.extensions`, ...): Connect answers
  `CANNOT_MODIFY_STATIC_CONFIG`;
- every other `spark.*` setting except `spark.sql.*` and `spark.hadoop.*`: the core settings
  (`spark.executor.memory`, `spark.serializer`, ...) are refused with `CANNOT_MODIFY_CONFIG`,
  and the rest (`spark.master`, `spark.app.name`, `spark.default.parallelism`, ...) are accepted
  but do nothing on a driver that is already running.

Keys outside `spark.*` pass: Spark keeps them as plain session settings.
"""

from __future__ import annotations

#: Spark 4.3.0's static SQL settings, as `javap -c -p` of two classes of the pyspark 4.3.0 wheel's
#: jars shows: every key `StaticSQLConf$` (spark-catalyst_2.13-4.3.0.jar) builds, and those
#: `HiveUtils$` (spark-hive_2.13-4.3.0.jar) builds with `buildStaticConf`. No other class builds
#: static SQL settings but `Connect$`, whose `spark.connect.*` keys fall under the `spark.*` rule.
#: tests/unit/test_spark_conf.py checks the list against the installed pyspark's jars.
STATIC_SQL_CONFS: frozenset[str] = frozenset(
    {
        # StaticSQLConf
        "spark.python.sql.dataFrameDebugging.enabled",
        "spark.sql.artifact.copyFromLocalToFs.allowDestLocal",
        "spark.sql.avro.schemaUrlAllowedSchemes",
        "spark.sql.broadcastExchange.maxThreadThreshold",
        "spark.sql.cache.serializer",
        "spark.sql.catalogImplementation",
        "spark.sql.codegen.cache.maxEntries",
        "spark.sql.codegen.comments",
        "spark.sql.debug",
        "spark.sql.defaultUrlStreamHandlerFactory.enabled",
        "spark.sql.event.truncate.length",
        "spark.sql.extensions",
        "spark.sql.extensions.test.loadFromCp",
        "spark.sql.filesourceTableRelationCacheSize",
        "spark.sql.globalTempDatabase",
        "spark.sql.hive.thriftServer.http.sniHostCheckEnabled",
        "spark.sql.hive.thriftServer.singleSession",
        "spark.sql.kafka.disallowedOptions",
        "spark.sql.legacy.hive.thriftServer.allowSettingSystemProperties",
        "spark.sql.legacy.sessionInitWithConfigDefaults",
        "spark.sql.metadataCacheTTLSeconds",
        "spark.sql.queryExecutionListeners",
        "spark.sql.reflect.allowList",
        "spark.sql.restrictedMode.enabled",
        "spark.sql.resultQueryStage.maxThreadThreshold",
        "spark.sql.shuffleExchange.maxThreadThreshold",
        "spark.sql.sources.disabledJdbcConnProviderList",
        "spark.sql.sources.schemaStringLengthThreshold",
        "spark.sql.streaming.streamingQueryListeners",
        "spark.sql.streaming.ui.enabled",
        "spark.sql.streaming.ui.enabledCustomMetricList",
        "spark.sql.streaming.ui.retainedProgressUpdates",
        "spark.sql.streaming.ui.retainedQueries",
        "spark.sql.subquery.maxThreadThreshold",
        "spark.sql.ui.retainedExecutions",
        "spark.sql.warehouse.dir",
        # HiveUtils
        "spark.sql.hive.metastore.barrierPrefixes",
        "spark.sql.hive.metastore.jars",
        "spark.sql.hive.metastore.jars.path",
        "spark.sql.hive.metastore.sharedPrefixes",
        "spark.sql.hive.metastore.version",
        "spark.sql.hive.version",
    }
)

#: `spark.*` prefixes a job may set per session.
SESSION_PREFIXES = ("spark.sql.", "spark.hadoop.")

STATIC_SETTING_REASON = (
    "a static Spark setting: set it on the TaskExecutor's Spark (spark.* in its configuration), not per job"
)


def refusal(key: str) -> str | None:
    """Why a job may not set `key` in its `config`; None if it may."""
    if key in STATIC_SQL_CONFS or (key.startswith("spark.") and not key.startswith(SESSION_PREFIXES)):
        return f"{key} is {STATIC_SETTING_REASON}"
    return None
