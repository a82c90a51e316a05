"""Analysis input and output: the one loader, the steps-table format, foreign formats, exports and the report.

The detectors (:mod:`telemetry.analysis.detectors`) sit between: they take the table this package loads and
return the findings this package renders.
"""
