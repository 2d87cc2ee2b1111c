"""``pipepool run``: a batch of commands in parallel on a LocalExecutor, GNU parallel style.

One module per job: ``_cli`` parses the command line (``_compat``: GNU parallel's
option syntax and the options refused), ``_inputs`` reads the input sources into rows,
``_template`` renders rows into jobs, ``_job`` runs one command in a pool worker (its
own session, timeout, resource use) with ``_reaper`` making sure no descendant is left
behind, ``_runner`` drives the executor from the main thread (feeding, retries, halt,
Ctrl-C) with ``_gate`` deciding when a job may start and in which slot, ``_joblog``
writes and reads GNU parallel's joblog, ``_output`` prints each job's output,
``_progress`` draws the live bar, ``_summary`` reports the outcome and the exit status,
``_halt`` parses ``--halt``; ``_options`` holds the runner's record.
"""
