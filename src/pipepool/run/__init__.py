"""``pipepool run``: a batch of commands in parallel on a LocalExecutor, GNU parallel style.

One module per job: ``_inputs`` builds the job list from lines or ``:::`` arguments,
``_job`` runs one command in a pool worker (its own session, timeout, no descendant
left behind), ``_runner`` drives the executor from the main thread (feeding, retries,
halt, Ctrl-C), ``_joblog`` writes and reads GNU parallel's joblog, ``_output`` prints
each job's output grouped, ``_progress`` draws the live bar, ``_summary`` reports the
outcome and the exit status, ``_halt`` parses ``--halt``.
"""
