"""The GPU catalogue and the roofline presets derived from it.

Reading order: ``catalogue`` (the :class:`Gpu` row: datasheet peaks by dtype, memory,
bandwidth, SM count, links, the device names engines log, the measured data that calibrates
it or the proxy GPU that stands in where it has none; the table and the lookups derived from
it), ``hardware`` (the roofline's :class:`Hardware` preset of each row, and the host-side
execution and sampler presets; the draft's weight bytes at low precision).
"""
