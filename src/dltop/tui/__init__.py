"""The Textual and Rich client: the viewer, headless progress, CLI listings.

With ``dltop.cli``, the only code that may import Textual or Rich.
"""
