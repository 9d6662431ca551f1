"""The Celery broker between the master and its TaskExecutors: what both sides agree on.

`celery_app` holds the app's settings, the task and command names and the queue naming;
`filesystem_transport` the standalone mode's broker. The master's sender lives in
`sparkdispatch.resourcemanager.celery_gateway`, the worker's side in `sparkdispatch.taskexecutor`.
"""
