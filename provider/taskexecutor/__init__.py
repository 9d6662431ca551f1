"""TaskExecutors: Celery workers whose slots run PySpark tasks on a warm SparkSession."""
