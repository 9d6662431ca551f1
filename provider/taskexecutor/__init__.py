"""TaskExecutors: Celery workers whose slots run PySpark tasks on a warm SparkSession.

`settings` holds what the Spark Connect server and the slot processes read from the configuration.
"""
