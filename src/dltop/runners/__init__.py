"""Runners: the parent-side registry, and child scripts (stdlib + framework, Py 3.6) in child/."""
