"""The typed read API: every query the readers (results/, live/, report/, cli/, executors) ask.

One module per concern; each takes a connection (``ReadDb`` or the writer's
``sqlite_utils.Database``) and returns rows or frozen dataclasses. The fallbacks for
databases an older dltop wrote are settled here (:mod:`.schema`), once per connection,
never in the readers. No module outside ``store/`` holds SQL text
(tests/store/test_sql_owner.py).
"""
