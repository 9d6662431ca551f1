"""The processes and the command line: the `sparkdispatch` command (cli, cli_render), one
master process (master) and `sparkdispatch standalone` (standalone).
"""
