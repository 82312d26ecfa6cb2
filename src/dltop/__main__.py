"""``python -m dltop`` entry point."""

from dltop.cli import main

raise SystemExit(main())
