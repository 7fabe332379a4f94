"""Code that only the benchmarks and validation studies use, kept out of the shipped package.

``causes`` (what each catalog entry's explanation should name), ``real_workloads`` (the real-model
suite's workloads) and ``intervals`` (the Wilson interval the studies report hit rates with). Import as
``validation.<module>`` with ``benchmarks/`` on ``sys.path``, as the scripts there do.
"""
