"""The Textual client (the only package besides cli.py that may import Textual or Rich)."""
