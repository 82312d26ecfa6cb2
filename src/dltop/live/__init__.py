"""What a viewer shows, read without blocking it: campaign state and device frames.

Headless (no Textual, no Rich): the TUI calls these from worker threads and
renders the frozen results.
"""
