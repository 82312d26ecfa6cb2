"""dltop: benchmark deep-learning frameworks from the terminal."""

__version__ = "0.1.0"
