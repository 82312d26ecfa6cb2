"""Where a run's runner executes: the one place that tells local from Slurm runs.

:mod:`~dltop.jobs.executors.pick` picks a run's
:class:`~dltop.jobs.executors.base.RunExecutor` once (the local one, a Slurm batch
job, or a step of the allocation dltop runs in), and the one that cleans up after a
dead engine's run; :mod:`~dltop.jobs.executors.where` answers preflight's question
(are the devices this host's?) without loading any executor. The Slurm modules
(scripts, queries, the job watches, resume's adoption) live here too.

Nothing is imported here: a viewer's preflight loads :mod:`.where` alone, never the
supervisor or the sampler the executors use.
"""
