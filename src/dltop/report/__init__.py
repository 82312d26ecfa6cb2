"""``dltop report``: an offline HTML report and paper figures from stored campaigns.

Vega-Lite specs are the one source of every figure (:mod:`dltop.report.specs`),
rendered to SVG, PNG or PDF by vl-convert without a browser or network.
``data``/``runs`` read what each figure plots, ``html`` writes the page,
``figures`` the files; vl-convert is imported only when a figure is rendered.
"""
