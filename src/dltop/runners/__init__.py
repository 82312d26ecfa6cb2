"""Runners: the parent-side registry, and child scripts (stdlib + framework, Python 3.6 syntax) under child/."""
