"""The queue and the supervisor: expand, spawn, time out, classify, store."""
