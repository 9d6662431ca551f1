"""TaskExecutors: Celery workers whose slots run PySpark tasks on a warm SparkSession.

`settings` holds what the Spark Connect server, the slot processes and the jobs' Python
environments (`python_environments`) read from the configuration.
"""
