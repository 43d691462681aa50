"""Plots and the HTML report of a run, built from its files only (no models, no training code).

:mod:`tether.plots.curves` draws PNGs with matplotlib's Agg canvas; :mod:`tether.plots.report`
assembles ``report.html``.
"""

from tether.plots.curves import best_of_n_plot, frontier_plot, metric_panels, training_curves

__all__ = ["best_of_n_plot", "frontier_plot", "metric_panels", "training_curves"]
