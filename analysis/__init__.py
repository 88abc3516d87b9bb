"""Sweeps, paired comparisons, plots and reports over simulator runs."""
