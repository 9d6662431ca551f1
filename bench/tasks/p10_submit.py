"""One P10 vertex as its own Spark application, as a SparkSubmitOperator per Airflow task runs it:

    spark-submit [--master ...] p10_submit.py VERTEX_ID OUT_DIR PARAMS_JSON

Its inputs are read from, and its result written to, `OUT_DIR/<vertex>/<subtask>` (`p10_tasks.run_materialised`).
"""

import json
import sys

from p10_tasks import VERTICES, run_materialised
from pyspark.sql import SparkSession

if __name__ == "__main__":
    vertex_id, out, params = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    spark = SparkSession.builder.appName(f"p10-{vertex_id}").getOrCreate()
    try:
        run_materialised(spark, next(v for v in VERTICES if v["id"] == vertex_id), params, out)
    finally:
        spark.stop()
