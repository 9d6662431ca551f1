"""The Dispatcher: accepts jobs and runs one JobMaster each (dispatcher), answers for them, running
and archived (queries, its read side), what a new leader
recovers from the HA stores (recovery), repairs of ended jobs (repair), finished jobs kept
queryable (archive) and the leader's removal of unused artifacts (blob_cleanup); their settings
(settings), read once from the configuration.
"""
