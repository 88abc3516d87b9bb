"""Which requests a simulation serves and when they arrive.

Reading order: ``arrivals`` (trace requests or a workload file, arrival processes),
``lengths`` (request-length distributions given by flags instead of a file).
"""
