"""The master's Prometheus metrics (master) and the events the Dispatcher and JobMasters
report to them (events).
"""
