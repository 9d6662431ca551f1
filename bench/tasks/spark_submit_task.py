"""What `spark-submit --master local[2]` runs per task in P1: a session, `spark.range(10).count()`, stop."""

from pyspark.sql import SparkSession

if __name__ == "__main__":
    spark = SparkSession.builder.appName("p1-spark-submit").getOrCreate()
    try:
        assert spark.range(10).count() == 10
    finally:
        spark.stop()
