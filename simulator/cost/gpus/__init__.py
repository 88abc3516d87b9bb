"""The GPU catalogue: one row per GPU, every other table about GPUs derived from it.

Reading order: ``catalogue`` (the :class:`Gpu` row: datasheet peaks by dtype, memory,
bandwidth, SM count, links, the device names engines log, the measured data that calibrates
it or the proxy GPU that stands in where it has none; the table :data:`GPUS` and the lookups
derived from it).
"""
